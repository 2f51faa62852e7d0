"""The bottom layer: what a scenario is, and the contracts plug-ins declare.

It imports nothing else of ftbench, and no torch or pandas: ``ftbench list``, ``show``
and ``validate`` run in milliseconds. Modules: ``config`` (typed validation with errors
that name the key), ``registry`` (plug-ins and their discovery), ``strategy`` and
``workload`` (their declarations and registries), ``faults`` (fault kinds, targets,
triggers, and their registry), ``model`` (the dataclasses), ``loader`` (read, override,
validate, expand the sweep), ``overrides`` (dotted keys), ``requirements`` (``launch.env``),
``catalogue`` (named scenarios), ``figures`` (the one table of figures and outcomes),
``limits``, and ``docgen`` (the docs pages generated from these declarations).
"""
