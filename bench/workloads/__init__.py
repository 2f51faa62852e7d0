"""Workloads: what the ranks compute while faults are injected.

Each workload is one folder here: its knobs (a dataclass, validated from
``[workload]``) and registration in ``__init__.py``, its rank-side implementation
beside it (imported lazily: it needs torch). :mod:`bench.workloads.base` is the
contract.
"""

from __future__ import annotations

from bench.scenario.registry import Plugin, Registry

WORKLOADS: Registry[Plugin] = Registry("workload")
