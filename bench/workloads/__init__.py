"""Workloads: what the ranks compute while faults are injected, one plug-in folder each.

Layer: above :mod:`bench.rank`, whose contract they implement; found by discovery.

Each folder declares its knobs (a dataclass, validated from ``[workload]``) and
registers them in its ``__init__.py`` (:data:`bench.scenario.workload.WORKLOADS`); its
rank-side implementation sits beside it, imported lazily (it needs torch). The
contract it implements is :class:`bench.rank.workload.Workload`.
"""
