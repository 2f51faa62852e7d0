"""The harness's own instruments, measured: injection stamps and event writes.

- **Stamp to delivery.** An injection is stamped just before ``kill(2)``. How far is that
  stamp from the signal taking effect? For SIGKILL, the effect is the process being gone,
  watched through a pidfd (the kernel wakes the watcher when the process exits); for
  SIGSTOP, the process state turning to ``T`` in ``/proc``. Both observations add their
  own small latency (a wake-up, a read), so the figures are upper bounds.
- **One event.** What ``EventWriter.emit`` costs for a step-sized event (formatting it
  and one ``write(2)`` on an ``O_APPEND`` file), warm: the price every step of every rank
  pays for being observed, before the cold caches a rank meets after a collective
  multiply it (docs/calibration.md).
"""

from __future__ import annotations

import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.procs.events import EventWriter
from bench.procs.hygiene import set_pdeathsig


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], preexec_fn=set_pdeathsig)


def kill_delivery(samples: int = 20) -> list[float]:
    """Seconds from the stamp before ``kill(SIGKILL)`` to the process being gone."""
    out = []
    for _ in range(samples):
        proc = _sleeper()
        time.sleep(0.05)
        fd = os.pidfd_open(proc.pid)
        try:
            t0 = time.monotonic_ns()
            os.kill(proc.pid, signal.SIGKILL)
            select.select([fd], [], [], 10)
            out.append((time.monotonic_ns() - t0) / 1e9)
        finally:
            os.close(fd)
            proc.wait(timeout=10)
    return out


def stop_delivery(samples: int = 20) -> list[float]:
    """Seconds from the stamp before ``kill(SIGSTOP)`` to the process being stopped."""
    out = []
    proc = _sleeper()
    time.sleep(0.05)
    stat = Path(f"/proc/{proc.pid}/stat")
    try:
        for _ in range(samples):
            t0 = time.monotonic_ns()
            os.kill(proc.pid, signal.SIGSTOP)
            deadline = time.monotonic() + 5
            while stat.read_bytes().rsplit(b")", 1)[1].split()[0] != b"T" and time.monotonic() < deadline:
                pass
            out.append((time.monotonic_ns() - t0) / 1e9)
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    return out


def event_cost(events: int = 5000, batches: int = 5) -> list[float]:
    """Seconds per ``emit`` of a step-sized event, per batch."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        writer = EventWriter(Path(tmp) / "probe.jsonl", src="rank", rank=0, pid=os.getpid())
        for _ in range(batches):
            t0 = time.perf_counter()
            for step in range(events):
                writer.emit("step_end", step=step, step_s=0.01, gen=0, world_size=4, group_rank=0, loss_share=0.1)
            out.append((time.perf_counter() - t0) / events)
        writer.close()
    return out


def measure() -> dict[str, Any]:
    """Every probe, summarised for run.json and the calibration table."""

    def summary(values: list[float]) -> dict[str, float]:
        return {"n": len(values), "median_s": statistics.median(values), "max_s": max(values)}

    return {
        "sigkill_stamp_to_gone": summary(kill_delivery()),
        "sigstop_stamp_to_stopped": summary(stop_delivery()),
        "event_emit": summary(event_cost()),
    }
