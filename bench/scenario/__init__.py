"""The scenario model: TOML files in, validated frozen dataclasses and sweep points out.

Nothing here imports torch or pandas: ``ftbench list``, ``show`` and ``validate`` run in
milliseconds. Modules: ``config`` (typed validation with errors that name the key),
``registry`` (plug-ins and their discovery), ``model`` (the dataclasses), ``loader``
(read, override, validate, expand the sweep), ``overrides`` (dotted keys), ``catalogue``
(named scenarios), ``faults`` (fault kinds, targets, triggers), ``figures`` (the one
table of figures and outcomes).
"""
