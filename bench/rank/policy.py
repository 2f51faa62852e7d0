"""What a strategy decides inside a rank: the contract between the loop and a strategy.

The training loop (:mod:`bench.rank.loop`) knows nothing of recovery. It runs steps
over the :class:`~bench.rank.comm.Collectives` the policy hands it, and asks the policy at
three moments: how to form the first world (:meth:`RankPolicy.start`), what to do with
a failed step (:meth:`RankPolicy.on_failure`) and whether anything happens between two
steps (:meth:`RankPolicy.after_step`: a checkpoint, a growth of the world). A policy
answers with a :class:`Position` to go on from, or an exit code to end the rank with.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from bench.rank.comm import CollectiveError, Collectives, Hook
from bench.rank.entry import RankSpec
from bench.results.events import EventWriter
from bench.workloads.base import Workload


@dataclass(frozen=True, slots=True)
class World:
    """One generation of the job's membership, as this rank sees it."""

    gen: int
    members: tuple[int, ...]
    """Stable ids (launch ranks) in group-rank order."""
    me: int

    @property
    def group_rank(self) -> int:
        return self.members.index(self.me)

    @property
    def size(self) -> int:
        return len(self.members)


@dataclass(frozen=True, slots=True)
class Position:
    """Where the loop stands: the world, its collectives, the next step to run."""

    world: World
    comm: Collectives
    step: int
    """The next step to run (1-based)."""
    committed: int
    """The last step this rank finished (its state includes it)."""


class RankPolicy(ABC):
    """A strategy's rank side. Constructed before the workload is built, so that store
    connections and watchers exist before the first step."""

    def __init__(self, spec: RankSpec, events: EventWriter, hooks: Sequence[Hook]) -> None:
        self.spec = spec
        self.events = events
        self.hooks = list(hooks)

    @abstractmethod
    def start(self, workload: Workload) -> Position | None:
        """Form the first world and attach the workload; None: nothing to do."""

    @abstractmethod
    def on_failure(self, pos: Position, err: CollectiveError, workload: Workload) -> Position | int:
        """Step ``pos.step`` failed (its detection is recorded): go on from a new
        position, or end the rank with an exit code."""

    def after_step(self, pos: Position, workload: Workload) -> Position | int:
        """Step ``pos.committed`` succeeded; the position to run the next step from."""
        return Position(world=pos.world, comm=pos.comm, step=pos.committed + 1, committed=pos.committed)

    def finish(self, pos: Position) -> None:
        """Every step is done (called once, before ``train_end``)."""
