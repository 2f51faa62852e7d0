"""Faults of the machine itself: a rank's memory runs out (``oom``), the checkpoint
target fills up (``storage``). Both change the machine for the trial (a memory cgroup
per rank, a tmpfs over the checkpoint directory), which needs root; a scenario that
names one is refused when it is read on a machine that cannot serve it."""

from __future__ import annotations

from dataclasses import dataclass

from bench.scenario.config import bounded
from bench.scenario.faults import FAULTS, FaultKind
from bench.scenario.limits import MAX_SECONDS


@dataclass(frozen=True, kw_only=True, slots=True)
class OomParams:
    duration_s: float = bounded(30.0, gt=0, le=MAX_SECONDS)
    """How long the limit holds (it follows the group's usage down meanwhile); a rank
    that allocated nothing new in that time is not ended, and the limit is lifted."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StorageParams:
    duration_s: float = bounded(gt=0, le=MAX_SECONDS)
    """How long the file system stays full before the filler is deleted."""
    size_mb: int = bounded(64, ge=1, le=1 << 20)
    """Size of the tmpfs mounted over the trial's checkpoint directory (it holds the
    checkpoints before the fault: at least two of them, as a save writes the new one
    before it drops the old). It is memory: it counts against the machine's."""
    leave_mb: float = bounded(0.0, ge=0)
    """Space the filler leaves free: 0, a save fails at its first write; more, a save
    smaller than this still fits."""


def oom_unavailable(params: object) -> str | None:
    from injectors.cgroup import unavailable

    return unavailable()


def storage_unavailable(params: object) -> str | None:
    from injectors.storage import unavailable

    return unavailable()


FAULTS.register(
    FaultKind(
        name="oom",
        params=OomParams,
        impl="injectors.cgroup:Oom",
        family="machine",
        machine="bench.scenario.faults.machine:oom_unavailable",
        summary="the kernel's OOM killer ends the target: its memory cgroup's limit drops to what it holds",
    )
)
FAULTS.register(
    FaultKind(
        name="storage",
        params=StorageParams,
        impl="injectors.storage:Fill",
        family="machine",
        machine="bench.scenario.faults.machine:storage_unavailable",
        summary="the checkpoint directory's file system (a size-limited tmpfs) fills up for duration_s",
    )
)
