"""The interface every checkpoint design keeps, and what they share.

A design is built once per world (a restart's fresh process, an NVRx iteration), after
the process group exists, by every rank at the same point: some designs form groups of
their own. The policy then calls :meth:`Checkpointer.restore` once, :meth:`save` every
``checkpoint_every`` steps, :meth:`poll` after the other steps and :meth:`finish` at the
end of training.

Events (the figures read them, :mod:`bench.results.facts`):

- ``checkpoint`` (design, gen, step, blocked_s, save_s, bytes): the save returned and the
  loop goes on. ``blocked_s`` is how long the training loop was held, ``save_s`` the same
  time (it keeps the meaning ``torch-save`` gave it: the save's cost to training), and
  ``bytes`` what this rank wrote, when known before the save is finished;
- ``checkpoint_done`` (design, gen, step, background_s, bytes): an asynchronous save
  finished in the background, stamped when it did; ``background_s`` runs from the moment
  the loop went on;
- ``restore_start`` / ``restore_end`` (how, bytes, step): the state loaded at start.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from torch.distributed.checkpoint.api import CheckpointException

from bench.procs.events import EventWriter
from bench.rank.checkpoint import IMPLS
from bench.rank.comm import CollectiveError
from bench.rank.entry import RankSpec
from bench.rank.policy import Position, World
from bench.rank.workload import Workload
from bench.scenario.registry import load_path


@dataclass(frozen=True, kw_only=True, slots=True)
class Where:
    """What a design needs to know of the world it saves for."""

    directory: Path
    """The trial's checkpoint directory (shared by every rank of one host)."""
    gen: int
    group_rank: int
    group_size: int
    timeout_s: float
    """Bound of one collective of a design's own (the workload's process-group timeout)."""


class CheckpointTimeout(RuntimeError):
    """Background work of a save outlived its deadline (a peer died, a disk hung)."""


class Checkpointer(ABC):
    design: ClassVar[str]

    def __init__(self, where: Where, workload: Workload, events: EventWriter) -> None:
        self.where = where
        self.workload = workload
        self.events = events

    @property
    def deadline_s(self) -> float:
        """How long anything of a save may be waited for: a save is at most a few
        collectives (plan, scatter, gather of results), each bounded by ``timeout_s``,
        plus the writing; past this the wait is an error, never a hang."""
        return 4 * self.where.timeout_s

    @abstractmethod
    def save(self, step: int) -> None:
        """Checkpoint the state after ``step``; returns when the loop may go on."""

    def poll(self) -> None:
        """Record background work that finished since the last call (between steps)."""

    def finish(self) -> None:
        """Wait (within the deadline) for background work before the rank ends."""

    @abstractmethod
    def restore(self) -> int:
        """Load the newest finished checkpoint, if any; the step it holds (0: none)."""

    def saved(self, step: int, started: float, **fields: Any) -> float:
        """Emit ``checkpoint`` for a save that held the loop since ``started``."""
        blocked = time.perf_counter() - started
        self.events.emit(
            "checkpoint", design=self.design, gen=self.where.gen, step=step, blocked_s=blocked, save_s=blocked, **fields
        )
        return blocked

    def background_done(self, step: int, went_on: int, done: int, nbytes: int) -> None:
        """Emit ``checkpoint_done`` for a background save of ``step`` that ran from
        ``went_on`` (the loop went on) to ``done`` (CLOCK_MONOTONIC ns)."""
        self.events.emit(
            "checkpoint_done",
            t=done,
            design=self.design,
            gen=self.where.gen,
            step=step,
            background_s=(done - went_on) / 1e9,
            bytes=nbytes,
        )

    def timed_out(self, step: int) -> CheckpointTimeout:
        """Record a background save of ``step`` that outlived the deadline; the error to raise."""
        self.events.emit("checkpoint_failed", design=self.design, step=step, why="deadline")
        return CheckpointTimeout(f"{self.design} checkpoint of step {step} unfinished after {self.deadline_s:g} s")


def between_steps(checkpointer: Checkpointer, pos: Position, every: int, events: EventWriter) -> CollectiveError | None:
    """Save after ``pos.committed`` when it is due, else record finished background work.

    A save's collectives fail like a step's when a peer dies during them: such a failure
    is recorded as the loop records a step's (``detect``, site ``checkpoint``) and
    returned for the policy's ``on_failure``; anything else is raised."""
    try:
        if pos.committed % every == 0:
            checkpointer.save(pos.committed)
        else:
            checkpointer.poll()
    except BaseException as exc:  # DCP gathers a rank's failure into a CheckpointException (a BaseException)
        err = pos.comm.as_failure(exc)
        if err is None and isinstance(exc, CheckpointException):
            err = CollectiveError(str(exc))
        if err is None:
            raise
        events.emit(
            "detect", how=err.how, site="checkpoint", error=str(err)[:300], gen=pos.world.gen, step=pos.committed
        )
        return err
    return None


def where(spec: RankSpec, world: World) -> Where:
    """The checkpoint's place for ``world``: the trial's directory, the workload's
    process-group timeout as the bound of a design's own collectives."""
    return Where(
        directory=Path(spec.checkpoint_dir),
        gen=world.gen,
        group_rank=world.group_rank,
        group_size=world.size,
        timeout_s=spec.workload.pg_timeout_s,
    )


def open_checkpointer(design: str, where: Where, workload: Workload, events: EventWriter) -> Checkpointer:
    """The design named by a strategy's ``checkpoint`` knob."""
    cls: type[Checkpointer] = load_path(IMPLS[design])
    return cls(where, workload, events)


def files_bytes(paths: Any) -> int:
    """Total size of the files among ``paths`` (a vanished one counts nothing)."""
    total = 0
    for p in paths:
        try:
            total += Path(p).stat().st_size
        except FileNotFoundError:
            pass
    return total
