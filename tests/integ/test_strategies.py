"""One short real trial of torchrun restart and of reinit growing back to full size."""

from __future__ import annotations

import math

import pytest

from bench.procs.events import read_events
from tests.integ.conftest import rows

pytestmark = pytest.mark.integ

RESTART = """
name = "restart"
[workload]
kind = "ddp"
world_size = 2
steps = 100
pg_timeout_s = 10
[[faults]]
kind = "kill"
target = { ranks = [1] }
trigger = { at_step = 60 }
[recovery]
strategy = "restart"
[recovery.restart]
checkpoint_every = 25
[measure]
trials = 1
deadline_s = 90
"""

REGROW = """
name = "regrow"
[workload]
kind = "ddp"
world_size = 3
# long enough after the fault for a replacement to start and join on a loaded machine:
# in CI a 150-step run ended before its replacement (forked 0.19 s, ready 0.16 s later)
steps = 400
pg_timeout_s = 10
[[faults]]
kind = "kill"
target = { ranks = [2] }
trigger = { at_step = 30 }
[recovery]
strategy = "reinit"
[recovery.reinit]
regrow = true
regrow_delay_s = 0.2
[measure]
trials = 1
deadline_s = 60
reference = true
"""


@pytest.mark.timeout(150)
def test_restart_resumes_from_the_last_checkpoint(run_scenario) -> None:
    report = run_scenario(RESTART)
    (r,) = rows(report)
    assert r["outcome"] == "recovered", r
    events = read_events(next((report.rundir.path / "events").glob("*/0")))
    inject = next(e["t"] for e in events if e["event"] == "inject")
    committed = max(e["step"] for e in events if e["event"] == "step_end" and e["t"] < inject + r["ttd_s"] * 1e9)
    restored = {e["step"] for e in events if e["event"] == "restore_end"}
    assert restored == {50}, "every restarted worker loads the checkpoint of step 50"
    assert r["steps_lost"] == committed - 50
    phases = [v for k, v in r.items() if k.startswith("phase_") and v is not None]
    assert sum(phases) == pytest.approx(r["downtime_s"], rel=1e-6)
    # fresh interpreters import torch: seconds, not milliseconds, and its own phase
    assert r["phase_import_s"] > 0.2
    assert r["checkpoint_s"] > 0 and r["checkpoint_bytes"] > 0


@pytest.mark.timeout(120)
def test_reinit_grows_back_to_full_strength(run_scenario) -> None:
    report = run_scenario(REGROW)
    (r,) = rows(report)
    assert r["outcome"] == "recovered", r
    assert r["ttr_s"] < 2.0
    assert r["ttd_s"] < r["ttfs_s"] < 30, "a replacement joined and the world was full again"
    assert r["restore_bytes"] > 0, "the replacement took its state from a live peer"
    assert abs(r["loss_delta"]) < 1e-4, "recovery must not change what is learnt"
    events = read_events(next((report.rundir.path / "events").glob("*/0")))
    finals = [e for e in events if e["event"] == "train_end"]
    assert {e["world_size"] for e in finals} == {3} and len(finals) == 3
    assert not math.isnan(r["goodput"])
