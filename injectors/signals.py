"""Process faults by signal: kill (SIGKILL, SIGTERM, SIGSEGV) and stall (SIGSTOP/SIGCONT).

The caller stamps the injection time immediately before :meth:`inject`; the signal is
queued by the kernel within microseconds of the ``kill(2)`` call.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from typing import Any

from injectors.base import Target


def _send(pids: Sequence[int], sig: int) -> list[int]:
    """Signal each pid; returns the pids that were still there to receive it."""
    hit = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            hit.append(pid)
        except ProcessLookupError:
            pass
    return hit


_SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "SIGSEGV": signal.SIGSEGV}


class Kill:
    """One-shot: the process ends by the signal's default action."""

    duration_s: float | None = None

    def __init__(self, *, signal: str = "SIGKILL") -> None:
        self.signal = signal
        self._sig = _SIGNALS[signal]

    def inject(self, target: Target) -> dict[str, Any]:
        return {"signal": self.signal, "signalled": _send(target.pids, self._sig)}

    def undo(self) -> None:
        """Nothing to revert: a dead process stays dead."""


class Stall:
    """Transient: SIGSTOP now, SIGCONT after ``duration_s`` (the harness calls undo)."""

    def __init__(self, *, duration_s: float) -> None:
        self.duration_s = duration_s
        self._stopped: list[int] = []

    def inject(self, target: Target) -> dict[str, Any]:
        self._stopped = _send(target.pids, signal.SIGSTOP)
        return {"signal": "SIGSTOP", "signalled": list(self._stopped), "duration_s": self.duration_s}

    def undo(self) -> None:
        _send(self._stopped, signal.SIGCONT)
        self._stopped = []
