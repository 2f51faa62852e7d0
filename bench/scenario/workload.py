"""The registry workloads register in (each a folder of :mod:`bench.workloads`).

A workload is declared as a plain :class:`~bench.scenario.registry.Plugin`: its knobs
(validated from ``[workload]``) and the ``module:Class`` of its rank-side
implementation, a :class:`bench.rank.workload.Workload`.
"""

from __future__ import annotations

from bench.scenario.registry import Plugin, Registry

WORKLOADS: Registry[Plugin] = Registry("workload")
