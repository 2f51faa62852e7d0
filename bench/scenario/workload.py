"""The registry workloads register in (each a folder of :mod:`bench.workloads`).

A workload is declared as a :class:`WorkloadPlugin`: its knobs (validated from
``[workload]``) and the ``module:Class`` of its rank-side implementation, a
:class:`bench.rank.workload.Workload`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.scenario.registry import Plugin, Registry

if TYPE_CHECKING:
    from bench.scenario.model import Scenario


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkloadPlugin(Plugin):
    """A workload's declaration."""

    check: Callable[[Scenario, str], None] | None = None
    """Further checks of a point (raising ConfigError), run before the strategy's: a
    workload whose state layout only some stacks can recover (a sharded model) refuses
    the others here, since a strategy cannot know every workload's layout."""


WORKLOADS: Registry[Plugin] = Registry("workload")
