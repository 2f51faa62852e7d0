"""Recovery strategies: the systems under test, one plug-in folder each.

Layer: above :mod:`bench.jobs`, :mod:`bench.rank` and :mod:`bench.workloads`; found by
discovery from the registry at the bottom, never imported by name from below.

Each folder declares its knobs (the ``[recovery.<name>]`` table) and registers a
:class:`~bench.scenario.strategy.Strategy` in its ``__init__.py``; its harness-side
:class:`~bench.jobs.job.Job` and its rank side (a :class:`~bench.rank.policy.RankPolicy`
for the shared training loop, or a rank main of its own) sit beside it. The machinery
several strategies share is one layer down, in :mod:`bench.jobs`; nothing but plug-in
folders lives here. Shared code never names a strategy: it reads the declaration.
``docs/adding-a-strategy.md`` walks through a new one.
"""
