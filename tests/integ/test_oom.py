"""The kernel's OOM killer, for real: a process over its memory cgroup's limit is ended
and the kernel's log names it, which is how a trial tells an OOM from a fault."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.procs.oom import oom_killed
from bench.results.derive import fault_figures

pytestmark = pytest.mark.integ

V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup")


def _cgroup() -> tuple[Path, str]:
    """A fresh memory cgroup and the name of its limit file."""
    if os.geteuid() != 0:
        pytest.skip("memory cgroups and /dev/kmsg need root")
    name = f"ftbench-test-{uuid.uuid4().hex[:8]}"
    if (V1 / "memory.limit_in_bytes").exists():
        return V1 / name, "memory.limit_in_bytes"
    if (V2 / "cgroup.controllers").exists() and "memory" in (V2 / "cgroup.controllers").read_text():
        return V2 / name, "memory.max"
    pytest.skip("no memory cgroup hierarchy here")


@pytest.mark.timeout(60)
def test_a_process_over_its_cgroup_limit_is_found_in_the_kernels_log() -> None:
    group, limit = _cgroup()
    group.mkdir()
    try:
        (group / limit).write_text(str(64 * 1024 * 1024))
        since = time.monotonic_ns()
        code = (
            "import os; open(os.environ['PROCS'], 'w').write(str(os.getpid())); print(os.getpid(), flush=True); "
            "b = bytearray(400_000_000)"
        )
        env = os.environ | {"PROCS": str(group / "cgroup.procs")}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, env=env)
        assert proc.returncode == -9, proc.stderr
        pid = int(proc.stdout.split()[0])
        found = oom_killed([pid, os.getpid()], since_ns=since)
        assert list(found) == [pid] and "out of memory: killed process" in found[pid].lower(), found
        assert oom_killed([pid], since_ns=time.monotonic_ns() + 10**10) == {}  # a record older than the trial
    finally:
        group.rmdir()


def test_an_oom_kill_is_named_in_every_row() -> None:
    events = [
        {"t": 1, "event": "inject", "src": "harness", "fault": 0, "ranks": [2]},
        {"t": 2, "event": "oom_kill", "src": "harness", "rank": 1, "pid": 99, "message": "Killed process 99"},
        {"t": 3, "event": "trial_end", "src": "harness", "outcome": "ended"},
    ]
    (row,) = fault_figures(events, faults=[("kill", "2")], steps=10, warmup_steps=0, phases=())
    assert "rank 1 (pid 99) was ended by the kernel's OOM killer" in row.error
