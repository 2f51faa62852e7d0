"""One trial of a reference loop: plain torch.distributed ranks, faulted from outside.

The harness hosts the c10d store (as ftbench's launcher and torchrun's agent do),
starts ``world_size`` fresh interpreters of the case's reference loop, follows its
progress until the case's :class:`~bench.calibrate.cases.Moment`, sleeps a uniformly
drawn part of one step and signals the victim, stamping ``time.monotonic_ns()`` just
before ``kill(2)`` as ftbench's injector does. Each survivor stamps the moment its
step raises; the first and the last of those minus the injection are what ftbench's
``ttd_rank_s`` and ``ttd_all_s`` are compared with.

The loops differ only in how they are started and how they report (:class:`Loop`):
``bare_rank.py`` writes JSON lines; the user-style script of ``examples/ddp/train.py``
prints its progress and appends its failures to ``--failure-log``.
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bench.calibrate.cases import Case, Moment
from bench.procs.hygiene import kill_all
from bench.procs.store import bound_store

READY_TIMEOUT_S = 180.0
"""Fresh interpreters importing torch on a loaded 2-core machine take seconds each."""
POLL_S = 0.005
"""How often the harness looks at a loop's progress: as often as ftbench's driver ticks."""


@dataclass(frozen=True, slots=True)
class Progress:
    steps: int
    """Steps the loop has finished (as far as the harness can see)."""
    first_step_ns: int | None
    """When the harness first saw a finished step."""
    step_s: float
    """What one step takes now (0 before it is known)."""


@dataclass(frozen=True, slots=True)
class ReferenceTrial:
    first_s: float
    """First survivor's exception minus the injection (NaN if none raised)."""
    last_s: float
    """Last survivor's, if every survivor raised (else NaN)."""
    step_s: float
    """What a step took before the fault."""
    jitter_s: float
    since_start_s: float
    """From the first step the harness saw to the injection."""
    stamp_to_sent_s: float
    error: str = ""


class Loop(Protocol):
    """A reference loop's ranks: how they start, how far they are, who raised when."""

    def start(self, rank: int, store_port: int) -> subprocess.Popen[bytes]: ...

    def progress(self) -> Progress: ...

    def raised(self) -> dict[int, int]:
        """Rank -> ``time.monotonic_ns()`` of its step raising."""
        ...


def run_reference_trial(case: Case, loop: Loop, *, moment: Moment, seed: int, trial: int) -> ReferenceTrial:
    """Run one trial of ``case`` on ``loop``'s ranks, faulted at ``moment``."""
    store = bound_store("127.0.0.1", timeout_s=READY_TIMEOUT_S)
    procs = [loop.start(rank, store.port) for rank in range(case.world_size)]
    try:
        progress = _await_moment(loop, moment, procs, READY_TIMEOUT_S + moment.upper_s())
        if progress is None:
            return ReferenceTrial(*(math.nan,) * 3, 0.0, 0.0, 0.0, error="ranks did not reach the moment")
        jitter = random.Random(f"bare:{seed}:{trial}:{case.name}").uniform(0.0, progress.step_s)
        time.sleep(jitter)
        victim = procs[case.victim]
        sig = signal.SIGKILL if case.fault == "kill" else signal.SIGSTOP
        t0 = time.monotonic_ns()
        os.kill(victim.pid, sig)
        t_sent = time.monotonic_ns()
        if case.fault == "stall":
            time.sleep(case.duration_s)
            os.kill(victim.pid, signal.SIGCONT)
        survivors = [p for i, p in enumerate(procs) if i != case.victim]
        _wait_exit(survivors, case.pg_timeout_s + 30)
        raised = {r: t for r, t in loop.raised().items() if r != case.victim}
        first = (min(raised.values()) - t0) / 1e9 if raised else math.nan
        last = (max(raised.values()) - t0) / 1e9 if len(raised) == case.world_size - 1 else math.nan
        since = (t0 - progress.first_step_ns) / 1e9 if progress.first_step_ns is not None else math.nan
        return ReferenceTrial(
            first,
            last,
            progress.step_s,
            jitter,
            since,
            (t_sent - t0) / 1e9,
            error="" if raised else "no survivor raised",
        )
    finally:
        kill_all([p.pid for p in procs])
        for p in procs:
            p.wait(timeout=30)


def _await_moment(
    loop: Loop, moment: Moment, procs: list[subprocess.Popen[bytes]], timeout_s: float
) -> Progress | None:
    """The loop's progress once it reached ``moment`` with a known step time; None if a
    rank died or the deadline passed first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and all(p.poll() is None for p in procs):
        progress = loop.progress()
        since = None if progress.first_step_ns is None else (time.monotonic_ns() - progress.first_step_ns) / 1e9
        if progress.step_s > 0 and moment.reached(progress.steps, since):
            return progress
        time.sleep(POLL_S)
    return None


def _wait_exit(procs: list[subprocess.Popen[bytes]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(POLL_S)


def lines(path: Path) -> list[str]:
    """The whole lines of a file another process appends to (none if it is not there)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return text.splitlines()[: text.count("\n")]
