"""No orphans: SIGKILL of the harness itself leaves no process of its run behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.procs import alive, marked

pytestmark = pytest.mark.integ

LONG = """
name = "long"
[workload]
kind = "ddp"
world_size = 4
steps = 100000
pg_timeout_s = 10
[[faults]]
kind = "stall"
duration_s = 30
target = { ranks = [1] }
trigger = { at_step = 20 }
[measure]
trials = 1
deadline_s = 120
"""


@pytest.mark.timeout(120)
def test_sigkill_of_the_harness_mid_trial_leaves_nothing(tmp_path: Path, write_scenario) -> None:
    scenario = write_scenario(LONG)
    before = set(marked())
    harness = subprocess.Popen([sys.executable, "-m", "bench", "run", str(scenario), "--out", str(tmp_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        run_pids: set[int] = set()
        while time.monotonic() < deadline:
            run_pids = {p for p in marked() if p not in before}
            stalled = list(tmp_path.rglob("harness.jsonl"))
            if stalled and '"inject"' in stalled[0].read_text():
                break  # ranks running, one of them stopped by SIGSTOP: the worst moment to die
            time.sleep(0.2)
        else:
            pytest.fail("the trial did not reach its injection in time")
        run_pids = {p for p in marked() if p not in before}
        assert len(run_pids) >= 6, "expected guard, forkserver, store and four ranks"
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait(timeout=10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(alive(p) for p in run_pids):
            time.sleep(0.1)
        assert not [p for p in run_pids if alive(p)], "processes outlived the harness"
    finally:
        if harness.poll() is None:
            harness.kill()
