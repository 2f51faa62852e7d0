"""Kill and stall against fail-stop and reinit, checked against first principles.

Bounds are what the mechanisms allow, not what this machine happened to measure: a
SIGKILLed peer's sockets are reset by the kernel at once, so detection takes
milliseconds and "well under a second" holds on any loaded machine; a stall past the
process-group timeout is detected at the timeout (plus scheduling slack), never before.
"""

from __future__ import annotations

import json

import pytest

from bench.procs.events import read_events
from tests.integ.conftest import at_timeout, rows

pytestmark = pytest.mark.integ

KILL = """
name = "kill"
[workload]
kind = "ddp"
world_size = 4
steps = 120
pg_timeout_s = 10
[[faults]]
kind = "kill"
target = {{ ranks = [2] }}
trigger = {{ at_step = 40 }}
[recovery]
strategy = "{strategy}"
[measure]
trials = 2
deadline_s = 60
# Ranks forked from the forkserver: this test is about detection and recovery, not about how ranks
# start (fresh interpreters, the default, are tested by test_calibrate_from_the_cli
# and test_cleanup.py), and four interpreters importing torch cost ~10 CPU-seconds.
[launch]
start_method = "forkserver"
"""

STALL = """
name = "stall"
[workload]
kind = "ddp"
world_size = 3
steps = 100
pg_timeout_s = 5
[[faults]]
kind = "stall"
duration_s = {duration}
target = {{ ranks = [1] }}
trigger = {{ at_step = 30 }}
[recovery]
strategy = "reinit"
[measure]
trials = {trials}
deadline_s = 60
"""


@pytest.mark.timeout(180)
def test_kill_reinit_recovers_within_a_second(run_scenario) -> None:
    report = run_scenario(KILL.format(strategy="reinit"))
    assert report.status == "complete"
    for r in rows(report):
        assert r["outcome"] == "recovered", r
        assert 0 < r["ttd_s"] <= r["ttd_all_s"] < 1.0
        assert 0 < r["ttr_s"] < 2.0
        assert r["steps_lost"] in (0, 1)
        assert r["downtime_s"] == pytest.approx(r["ttd_s"] + r["ttr_s"])


@pytest.mark.timeout(180)
def test_kill_failstop_fails_with_a_detection(run_scenario) -> None:
    report = run_scenario(KILL.format(strategy="failstop"))
    for r in rows(report):
        assert r["outcome"] == "failed", r
        assert 0 < r["ttd_s"] < 1.0
        assert r["ttr_s"] is None  # NaN: fail-stop does not recover


@pytest.mark.timeout(180)
def test_stall_past_the_timeout_is_detected_at_the_timeout(run_scenario) -> None:
    report = run_scenario(STALL.format(duration=8, trials=2))
    for r in rows(report):
        assert at_timeout(r["ttd_s"], 5.0), r
        assert r["outcome"] == "recovered"
    events = (report.rundir.path / "events").rglob("rank1-*.jsonl")
    assert any('"evicted"' in p.read_text() for p in events), "the stalled rank should be left out when it wakes"


@pytest.mark.timeout(120)
def test_stall_within_the_timeout_is_absorbed(run_scenario) -> None:
    report = run_scenario(STALL.format(duration=3, trials=1))
    (r,) = rows(report)
    assert r["outcome"] == "absorbed", r
    assert r["ttd_s"] is None
    # between_s (train_end): the time between a rank's steps. Steps and the gaps between
    # them are disjoint spans of its training, so together they cannot exceed it.
    events = read_events(next(report.rundir.path.glob("events/*/0")))
    for rank in range(3):
        mine = [e for e in events if e.get("src") == "rank" and e.get("rank") == rank]
        start, end = (next(e for e in mine if e["event"] == name) for name in ("train_start", "train_end"))
        steps = sum(e["step_s"] for e in mine if e["event"] == "step_end")
        assert end["between_s"] > 0 and steps + end["between_s"] <= (end["t"] - start["t"]) / 1e9, end


@pytest.mark.timeout(180)
def test_forkserver_private_ranks_own_their_memory(run_scenario, host) -> None:
    """The calibrated launch mode end to end: every rank made the memory it shared with
    the forkserver its own before its first step, and the forkserver had preloaded what
    the workload's ranks import (an optimizer step for ddp), nothing else."""
    import multiprocessing.forkserver

    report = run_scenario(KILL.replace('"forkserver"', '"forkserver-private"').format(strategy="failstop"))
    for r in rows(report):
        assert r["outcome"] == "failed", r
        assert 0 < r["ttd_s"] < 1.0
    logs = list(report.rundir.path.glob("events/*/*/rank*.jsonl"))
    private = [json.loads(line) for path in logs for line in path.read_text().splitlines() if "memory_private" in line]
    assert len(logs) >= 2 * 4 and len(private) == len(logs)  # every rank of every trial, once
    for e in private:
        assert e["failed_ranges"] == 0 and e["copied_mib"] > 50, e
    server = multiprocessing.forkserver._forkserver
    assert server._preload_modules == ["bench.rank.zygote", "bench.rank.zygote_optim"]
