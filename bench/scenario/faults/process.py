"""Process faults by signal: whole processes die or stop (also node loss and
control-plane faults, through their targets)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bench.scenario.config import bounded
from bench.scenario.faults import FAULTS, DurationParams, FaultKind
from bench.scenario.limits import MAX_SECONDS


@dataclass(frozen=True, kw_only=True, slots=True)
class KillParams:
    signal: Literal["SIGKILL", "SIGTERM", "SIGSEGV"] = "SIGKILL"
    """SIGKILL: sudden death; SIGTERM: the default action (no handler), as a scheduler's
    stop; SIGSEGV: a crash with the crash path's own exit status."""


FAULTS.register(
    FaultKind(
        name="kill",
        params=KillParams,
        impl="injectors.signals:Kill",
        family="process",
        hits_components=True,
        summary="SIGKILL / SIGTERM / SIGSEGV the target processes",
    )
)


@dataclass(frozen=True, kw_only=True, slots=True)
class DrainParams:
    grace_s: float = bounded(10.0, gt=0, le=MAX_SECONDS)
    """Seconds between SIGTERM and the SIGKILL of whatever is still alive (Slurm's
    ``KillWait`` and Kubernetes' ``terminationGracePeriodSeconds`` default to 30)."""


FAULTS.register(
    FaultKind(
        name="drain",
        params=DrainParams,
        impl="injectors.signals:Drain",
        family="process",
        hits_components=True,
        summary="planned maintenance: SIGTERM the targets, SIGKILL what is left after grace_s",
    )
)


@dataclass(frozen=True, kw_only=True, slots=True)
class HostDownParams:
    """No knobs: everything of the host dies at once, by SIGKILL."""


FAULTS.register(
    FaultKind(
        name="host-down",
        params=HostDownParams,
        impl="injectors.signals:HostDown",
        family="process",
        whole_host=True,
        summary="a whole host vanishes: its agent SIGKILLs every process of the host, then itself",
    )
)
FAULTS.register(
    FaultKind(
        name="stall",
        params=DurationParams,
        impl="injectors.signals:Stall",
        family="hang",
        hits_components=True,
        summary="SIGSTOP the targets for duration_s, then SIGCONT",
    )
)
