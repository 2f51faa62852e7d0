"""Fault kinds: the scenario's ``[[faults]]`` entries and the injectors that serve them.

A fault kind pairs its knobs (validated from the scenario) with the harness-side
injector in :mod:`injectors` that carries it out. The scenario names the fault; the
mechanism is the injector's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bench.config import bounded
from bench.registry import Plugin, Registry

FAULTS: Registry[Plugin] = Registry("fault kind")


@dataclass(frozen=True, kw_only=True, slots=True)
class KillParams:
    signal: Literal["SIGKILL", "SIGTERM", "SIGSEGV"] = "SIGKILL"
    """SIGKILL: sudden death; SIGTERM: the default action (no handler), as a scheduler's
    stop; SIGSEGV: a crash with the crash path's own exit status."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StallParams:
    duration_s: float = bounded(gt=0)
    """How long the target stays stopped (SIGSTOP) before SIGCONT resumes it."""


FAULTS.register(
    Plugin(
        name="kill",
        params=KillParams,
        impl="injectors.signals:Kill",
        summary="send SIGKILL / SIGTERM / SIGSEGV to the target ranks' processes",
    )
)
FAULTS.register(
    Plugin(
        name="stall",
        params=StallParams,
        impl="injectors.signals:Stall",
        summary="SIGSTOP the target ranks for duration_s, then SIGCONT",
    )
)
