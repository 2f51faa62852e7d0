"""What a trial's processes hold: resident memory, threads, and the bytes its hosts send.

A stack's fault-free cost is not only step time: torchft keeps a Manager server and a
lighthouse, NVRx a monitor per rank and a launcher, torchrun an agent. The sampler sees
all of them the way ``ps`` would: every process carrying the run's marker
(:mod:`bench.procs.hygiene`) except the harness and the run's own infrastructure (guard,
forkserver), read from ``/proc`` every :data:`SAMPLE_S`.

- **Peak resident memory per process** is the kernel's own high-water mark
  (``VmHWM``): exact whatever the sampling period, as long as the process is read once
  before it exits (at worst :data:`SAMPLE_S` of growth before its exit is missed).
- **The job's peak** (the sum over processes alive at the same moment) and the counts of
  processes and threads are sampled: a peak shorter than :data:`SAMPLE_S` can be missed.
- **Bytes on the wire** come from interface counters, read from a descriptor of
  ``/proc/thread-self/net/dev`` opened inside each host's network namespace (such a file
  keeps showing the namespace it was opened in). For hosts in namespaces of their own
  that is each host's ``eth0`` transmit counter, summed: what NICs would count. For a
  trial confined to one private namespace, its loopback's transmit counter: every byte
  one process of the job sent to another, once. Headers are included in both. Without
  a namespace the loopback is the machine's, shared with everything else, and nothing
  is counted.

Processes are found by scanning ``/proc`` for new pids only (a pid's environment is
read once, when it is first seen), so a sample costs a few ``/proc`` reads per process
of the trial.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.procs.hygiene import environ, run_of, settling, stat_fields

SAMPLE_S = 0.1
"""Sampling period: it bounds the resolution of the job-wide peak and of the counters'
time stamps, not the per-process peaks (the kernel keeps those)."""


@dataclass(frozen=True, slots=True)
class Counter:
    """One interface's transmit counter, read through a descriptor bound to its namespace."""

    label: str
    fd: int
    ifname: str

    def tx_bytes(self) -> int | None:
        try:
            text = os.pread(self.fd, 1 << 16, 0).decode(errors="replace")
        except OSError:
            return None
        for line in text.splitlines():
            name, sep, rest = line.partition(":")
            if sep and name.strip() == self.ifname:
                return int(rest.split()[8])  # receive has 8 columns, then transmit bytes
        return None


@dataclass(slots=True)
class _Proc:
    name: str
    ppid: int
    hwm: int = 0
    threads: int = 0


@dataclass(slots=True)
class Sampler:
    """Samples the processes of run ``run_id`` (but ``exclude``) on a thread of its own."""

    run_id: str
    exclude: Callable[[], set[int]]
    """The run's processes that are not the trial's (the harness, the guard, the forkserver)."""
    counters: list[Counter] = field(default_factory=list)
    wire_how: str = ""
    """How the counters count (for the record), "" when there are none."""
    interval_s: float = SAMPLE_S
    procs: dict[int, _Proc] = field(default_factory=dict)
    job_rss_peak: int = 0
    procs_peak: int = 0
    threads_peak: int = 0
    samples: int = 0
    wire: list[tuple[int, int]] = field(default_factory=list)
    """(CLOCK_MONOTONIC ns, bytes sent so far, summed over the counters)."""
    _seen: dict[int, bool] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="ftbench-resources", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Stop sampling (after one last sample) and return what was seen, for an event."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for c in self.counters:
            os.close(c.fd)
        self.counters = []
        return {
            "interval_s": self.interval_s,
            "samples": self.samples,
            "procs": {
                str(pid): {"name": p.name, "ppid": p.ppid, "hwm": p.hwm, "threads": p.threads}
                for pid, p in self.procs.items()
            },
            "job_rss_peak": self.job_rss_peak,
            "procs_peak": self.procs_peak,
            "threads_peak": self.threads_peak,
            "wire": self.wire,
            "wire_how": self.wire_how,
        }

    def _loop(self) -> None:
        while True:
            stopping = self._stop.wait(self.interval_s)
            self.sample()
            if stopping:
                return

    def sample(self) -> None:
        rss_sum = threads = count = 0
        for pid in self._trial_pids():
            status = _status(pid)
            if status is None:
                continue
            proc = self.procs.get(pid)
            if proc is None:
                fields = stat_fields(pid)
                proc = self.procs[pid] = _Proc(name=_name(pid), ppid=int(fields[1]) if len(fields) > 1 else 0)
            proc.hwm = max(proc.hwm, status.get("VmHWM", 0))
            proc.threads = max(proc.threads, status.get("Threads", 0))
            rss_sum += status.get("VmRSS", 0)
            threads += status.get("Threads", 0)
            count += 1
        self.job_rss_peak = max(self.job_rss_peak, rss_sum)
        self.procs_peak = max(self.procs_peak, count)
        self.threads_peak = max(self.threads_peak, threads)
        if self.counters:
            sent = [c.tx_bytes() for c in self.counters]
            if all(s is not None for s in sent):
                self.wire.append((time.monotonic_ns(), sum(s for s in sent if s is not None)))
        self.samples += 1

    def _trial_pids(self) -> list[int]:
        """Live pids of the run but the excluded; a new pid's environment is read once."""
        out = []
        live = set()
        exclude = self.exclude()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            live.add(pid)
            ours = self._seen.get(pid)
            if ours is None:
                ours = _marked(pid, self.run_id)
                if ours is not None:
                    self._seen[pid] = ours
            if ours and pid not in exclude:
                out.append(pid)
        for pid in [p for p in self._seen if p not in live]:
            del self._seen[pid]  # a reused pid is read again
        return out


def _marked(pid: int, run_id: str) -> bool | None:
    """Whether ``pid`` belongs to the run; None while it cannot tell yet (a process inside
    ``execve(2)`` reads as having no environment), so that it is read again next time."""
    env = environ(pid)
    if env is None:
        return False
    if settling(pid, env):
        return None
    return run_of(env) == run_id


def _status(pid: int) -> dict[str, int] | None:
    """VmRSS and VmHWM in bytes and Threads from /proc/PID/status; None once it is gone
    or a zombie (whose memory is already freed)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "State" and value.split()[:1] == ["Z"]:
            return None
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
        elif key == "Threads":
            out[key] = int(value)
    return out


def _name(pid: int) -> str:
    """What the process is, for the record: its command line's first words (a Python
    module or script is more telling than ``python3``)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [a.decode(errors="replace")[:60] for a in argv if a][:4]
    return " ".join([Path(words[0]).name, *words[1:]]) if words else "?"
