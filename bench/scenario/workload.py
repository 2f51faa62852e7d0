"""The registry workloads register in (each a folder of :mod:`bench.workloads`).

A workload is declared as a :class:`WorkloadPlugin`: its knobs (validated from
``[workload]``) and the ``module:Class`` of its rank-side implementation, a
:class:`bench.rank.workload.Workload`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench.scenario.registry import Plugin, Registry

if TYPE_CHECKING:
    from bench.scenario.model import Scenario


@dataclass(frozen=True, slots=True)
class Estimate:
    """What one rank of a workload holds beyond an idle rank, by part."""

    knob: str
    """The ``[workload]`` key that sizes it most (named in the refusal)."""
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.parts.values())


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkloadPlugin(Plugin):
    """A workload's declaration."""

    check: Callable[[Scenario, str], None] | None = None
    """Further checks of a point (raising ConfigError), run before the strategy's: a
    workload whose state layout only some stacks can recover (a sharded model) refuses
    the others here, since a strategy cannot know every workload's layout."""
    memory: Callable[[Any, int], Estimate] | None = None
    """What one rank holds beyond an idle rank, from the knobs and the world size
    (:mod:`bench.scenario.memory`): a point that cannot fit the machine is refused."""
    rank_preload: tuple[str, ...] = ("bench.rank.zygote_optim",)
    """Modules the forkserver imports for this workload's ranks: what its rank code
    would import itself and nothing more (``bench.rank.zygote_optim``: an optimizer's
    step, which imports ``torch._dynamo``), so a forked rank is not fatter than a fresh one."""
    strategy: str = ""
    """The one strategy that runs this workload, which a scenario of it gets when it names
    none (``command``: a job given as a command is its own stack); "": any."""


WORKLOADS: Registry[Plugin] = Registry("workload")


def own_strategy(kind: str) -> str:
    """The strategy workload ``kind`` declares as its only one ("" for most)."""
    plugin = WORKLOADS[kind]
    return plugin.strategy if isinstance(plugin, WorkloadPlugin) else ""
