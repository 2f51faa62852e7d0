"""What a strategy decides inside a rank: the contract between the loop and a strategy.

The training loop (:mod:`bench.rank.loop`) knows nothing of recovery. It runs steps
over the :class:`~bench.rank.comm.Collectives` the policy hands it, and asks the policy at
three moments: how to form the first world (:meth:`RankPolicy.start`), what to do with
a failed step (:meth:`RankPolicy.on_failure`) and whether anything happens between two
steps (:meth:`RankPolicy.after_step`: a checkpoint, a growth of the world). A policy
answers with a :class:`Position` to go on from, an exit code to end the rank with, or
:data:`RAISE` to let the error end the rank as it ends a plain script.
"""

from __future__ import annotations

import datetime
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import torch.distributed as dist

from bench.procs.events import EventWriter
from bench.rank.comm import CollectiveError, Collectives, Hook
from bench.rank.entry import RankSpec, store_client
from bench.rank.workload import Workload

RAISE: Final = "raise"
"""An answer of :meth:`RankPolicy.on_failure`: the failed step's error propagates out
of the training code and ends the process the way it ends a user's script (printed by
``sys.excepthook``, then the interpreter's own exit), not with ``os._exit``."""
Raise = Literal["raise"]


@dataclass(frozen=True, slots=True)
class World:
    """One generation of the job's membership, as this rank sees it."""

    gen: int
    members: tuple[int, ...]
    """Stable ids (launch ranks) in group-rank order."""
    me: int

    @property
    def group_rank(self) -> int:
        """This rank's position in ``members`` (ValueError if it is not a member)."""
        try:
            return _positions(self.members)[self.me]
        except KeyError:
            raise ValueError(f"{self.me} is not a member of generation {self.gen}") from None

    @property
    def size(self) -> int:
        return len(self.members)


_POSITIONS: dict[int, tuple[tuple[int, ...], dict[int, int]]] = {}
"""Group ranks by id of the last few worlds' member tuples (kept, so that an id is not
reused while it is a key)."""
_KEEP = 4
_POSITIONS_LOCK = threading.Lock()


def _positions(members: tuple[int, ...]) -> dict[int, int]:
    """Each member's group rank, built once per member tuple: a rank reads its own at
    every step, and ``members.index`` costs O(N) each time (60 µs at 8,192 members, which
    members that are threads of one process, in ``ftbench scale``, pay behind one
    interpreter lock: 15 s of resume's 17 s at 8,192)."""
    known = _POSITIONS.get(id(members))
    if known is not None and known[0] is members:
        return known[1]
    where = {m: i for i, m in enumerate(members)}
    with _POSITIONS_LOCK:  # threads of a rank (watchers) read worlds too
        while len(_POSITIONS) >= _KEEP:
            _POSITIONS.pop(next(iter(_POSITIONS)))
        _POSITIONS[id(members)] = (members, where)
    return where


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
    def on_failure(self, pos: Position, err: CollectiveError, workload: Workload) -> Position | int | Raise:
        """Step ``pos.step`` failed (its detection is recorded): go on from a new
        position, end the rank with an exit code, or let the error end it (:data:`RAISE`)."""

    def after_step(self, pos: Position, workload: Workload) -> Position | int:
        """Step ``pos.committed`` succeeded; the position to run the next step from."""
        return Position(world=pos.world, comm=pos.comm, step=pos.committed + 1, committed=pos.committed)

    def finish(self, pos: Position) -> None:
        """Every step is done (called once, before ``train_end``)."""

    def init_group(self, *, gen: int, rank: int, size: int, **how: Any) -> None:
        """``dist.init_process_group`` on the trial's backend with the workload's
        process-group timeout, the way the stack's users call it (``how``: its
        ``store=``/``init_method=`` and any other argument), then ``pg_ready``: the
        boundary every strategy's figures read the same way."""
        spec = self.spec
        if gen == 0 and spec.store_port:
            self.await_first_world(size)
        dist.init_process_group(
            spec.backend,
            rank=rank,
            world_size=size,
            timeout=datetime.timedelta(seconds=spec.workload.pg_timeout_s),
            **how,
        )
        self.events.emit(
            "pg_ready", gen=gen, world_size=size, backend=spec.backend, pg_timeout_s=spec.workload.pg_timeout_s
        )

    def await_first_world(self, size: int) -> None:
        """Wait until ``size`` ranks have reached the first rendezvous (or the trial's
        deadline), before the one timed by ``pg_timeout_s``.

        Scaffolding, not a figure: a job's launcher brings its workers up together, but
        ranks that import torch on shared cores, or on a host whose agent started them
        later, can arrive seconds apart, and a rendezvous that waits only the short
        timeout a scenario sets to measure detection would fail before the first step.
        The bare loop that calibrates ftbench waits the same way. Only ranks that
        ftbench's launcher started wait here (they have its store): a stack with a
        launcher of its own (torchrun's agent, NVRx's) brings its workers up its way."""
        store = store_client(self.spec)
        store.add("first_world", 1)
        deadline = time.monotonic() + self.spec.wait_s
        while store.add("first_world", 0) < size and time.monotonic() < deadline:
            time.sleep(0.005)
