"""Blame and hang evidence from real trials: whom the stack named, and the hung rank's stack.

Bounds follow from the mechanisms: reinit's survivors isolate a member only after they
detected the failure, so ``tta_s >= ttd_s``; a rank hung inside a collective for longer
than the process-group timeout is still hung when the survivors' timeout fires, so
py-spy, run then, finds it asleep in the hook.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from bench.procs.events import read_events
from tests.integ.conftest import rows

pytestmark = pytest.mark.integ

KILL = """
name = "blame-reinit"
[workload]
kind = "ddp"
world_size = 3
steps = 40
pg_timeout_s = 5
[[faults]]
kind = "kill"
target = { ranks = [1] }
trigger = { at_step = 15 }
[recovery]
strategy = "reinit"
[measure]
trials = 1
deadline_s = 40
"""

HANG = """
name = "hang-stack"
[workload]
kind = "ddp"
world_size = 3
steps = 40
pg_timeout_s = 1.5
[[faults]]
kind = "hang"
duration_s = 4
target = { ranks = [2] }
trigger = { at_step = 15 }
[recovery]
strategy = "reinit"
[measure]
trials = 1
deadline_s = 40
"""

TORCHFT_STALL = """
name = "blame-torchft"
[workload]
kind = "ddp"
world_size = 3
steps = 400
pg_timeout_s = 2
[[faults]]
kind = "stall"
duration_s = 6
target = { ranks = [2] }
trigger = { at_step = 20 }
[recovery]
strategy = "torchft"
[recovery.torchft]
join_timeout_ms = 100
heartbeat_timeout_ms = 2000
[measure]
trials = 1
deadline_s = 50
"""


@pytest.mark.timeout(60)
def test_reinit_blames_the_killed_rank(run_scenario) -> None:
    (r,) = rows(run_scenario(KILL))
    assert r["outcome"] == "recovered", r
    assert r["blame_correct"] == 1.0
    assert r["ttd_s"] <= r["tta_s"] < 5.0


@pytest.mark.timeout(60)
def test_a_hung_rank_stack_is_captured_while_it_hangs(run_scenario) -> None:
    report = run_scenario(HANG)
    (r,) = rows(report)
    assert r["outcome"] == "recovered", r
    assert r["blame_correct"] == 1.0
    events = read_events(Path(report.rundir.path) / "events" / r["point_hash"][:12] / "0")
    dumps = [e for e in events if e["event"] == "stack_dump"]
    assert len(dumps) == 1 and dumps[0]["ok"], dumps
    hung = next(e for e in events if e["event"] == "inject")
    ended = next(e for e in events if e["event"] == "fault_end")
    assert dumps[0]["of_rank"] == 2 and dumps[0]["of_pid"] == hung["pid"]
    assert hung["t"] < dumps[0]["t"] < ended["t"]  # taken while the rank was still hung
    text = (Path(report.rundir.path) / "events" / r["point_hash"][:12] / "0" / dumps[0]["file"]).read_text()
    assert "Hang._wait" in text or "_wait (injectors/rankside.py" in text, text


# Slow, and not in `make test`: with a 1 s heartbeat timeout on two busy cores the
# lighthouse once dropped a healthy replica first (blame_correct 0) during a CI run;
# 2 s makes that rarer, and whether torchft blames right under load is a measurement
# (compare-strategies' blame column), not something the default suite can promise.
@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.skipif(importlib.util.find_spec("torchft") is None, reason="torchft is not installed")
def test_torchft_quorum_drop_blames_the_stalled_replica(run_scenario) -> None:
    report = run_scenario(TORCHFT_STALL)
    (r,) = rows(report)
    events = read_events(Path(report.rundir.path) / "events" / r["point_hash"][:12] / "0")
    drops = [e for e in events if e["event"] == "detect" and e.get("how") == "quorum_drop"]
    assert drops, json.dumps([e for e in events if e["event"] in ("detect", "quorum")])[:2000]
    assert r["blame_correct"] == 1.0, drops
    assert not math.isnan(r["tta_s"]) and r["tta_s"] > 0
