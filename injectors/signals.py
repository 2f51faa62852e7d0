"""Process faults by signal: kill (SIGKILL, SIGTERM, SIGSEGV), stall (SIGSTOP/SIGCONT), a
drain (SIGTERM, then SIGKILL after a grace period) and a whole host's loss (SIGKILL to
everything of the host, run by its agent).

The caller stamps the injection time immediately before :meth:`inject`; the signal is
queued by the kernel within microseconds of the ``kill(2)`` call.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from typing import Any

from injectors.base import Target
from injectors.procfs import alive, stat_fields


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


class Drain:
    """Planned maintenance, as a scheduler drains a node: SIGTERM now, and when the
    grace period is over (the harness calls :meth:`undo` at ``duration_s``) SIGKILL
    to whatever is still alive. A stack that checkpoints or hands off on SIGTERM has
    the grace period to do it; one that ignores SIGTERM is killed at its end."""

    def __init__(self, *, grace_s: float) -> None:
        self.duration_s: float | None = grace_s
        self._pids: list[int] = []
        self.killed: list[int] = []

    def inject(self, target: Target) -> dict[str, Any]:
        self._pids = list(target.pids)
        return {"signal": "SIGTERM", "grace_s": self.duration_s, "signalled": _send(self._pids, signal.SIGTERM)}

    def undo(self) -> None:
        """The grace period is over: SIGKILL what is left (idempotent)."""
        left = [p for p in self._pids if alive(p)]
        self.killed += _send(left, signal.SIGKILL)
        self._pids = []


class HostDown:
    """One-shot. Run by a host's agent: SIGKILL every process below the agent (ranks,
    forkserver, an elastic agent and its workers), deepest first so that nobody is left
    to restart anyone; the agent then vanishes too (:mod:`bench.hosts.agent`). Given the
    processes a host was started as (``target.pids``: a command job's commands on that
    host), the same to each of them and everything below it."""

    duration_s: float | None = None
    ends_host = True

    def inject(self, target: Target) -> dict[str, Any]:
        roots = list(target.pids) or [os.getpid()]
        doomed = [p for root in roots for p in descendants(root)[::-1]] + list(target.pids)
        return {"signal": "SIGKILL", "signalled": _send(doomed, signal.SIGKILL)}

    def undo(self) -> None:
        """Nothing to revert: a lost host stays lost for the rest of the trial."""


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, parents before their children."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = stat_fields(int(entry))
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    queue = list(children.get(pid, []))
    while queue:
        p = queue.pop(0)
        out.append(p)
        queue.extend(children.get(p, []))
    return out


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
