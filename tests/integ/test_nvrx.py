"""NVRx for real: in-process restart and ft_launcher, a SIGKILL and a SIGSTOP each, and NVRx's
own fault injector against ftbench's.

Bounds follow from the knobs and the mechanisms, not from this machine's timings:

- in-process, kill: a survivor learns of the death from gloo at its next collective with
  the victim, or from NVRx once the victim's monitor process noticed it (within
  ``monitor_process_interval_s``); NVRx aborts no sooner than ``last_call_wait_s`` after it
  was told; the survivors are the same processes afterwards, in a world of two.
- in-process, stall: the stopped rank shows no progress, so its monitor process records a
  soft timeout after ``soft_timeout_s`` (less up to two watchdog intervals: NVRx's stamps
  lag by one) plus at most one check interval: before the process-group timeout. NVRx's
  abort cannot end the survivors' pending gloo collective, which returns at the
  process-group timeout only, and the restart's barrier waits for the victim to wake up
  (it is not past its hard timeout): the downtime is at least the stall.
- ft_launcher, kill: the agent sees the dead worker within its monitor interval and starts
  the whole group again as fresh processes, from the last checkpoint.
- ft_launcher, stall: the rank monitors kill a worker whose heartbeat (or step section) is
  older than its timeout, checked every ``workload_check_interval_s``: detection between
  the timeout less a step and the timeout plus a check, before the process-group timeout.
- NVRx's injector and ftbench's send the same SIGKILL to the same rank at the same step,
  so the figures differ by where in the step the signal lands (under a step) and by
  NVRx's polling (under ``monitor_process_interval_s``).
"""

from __future__ import annotations

import importlib.util
import statistics
from typing import Any

import pytest

from bench.procs.events import read_events
from tests.integ.conftest import rows

pytestmark = [
    pytest.mark.integ,
    pytest.mark.skipif(
        importlib.util.find_spec("nvidia_resiliency_ext") is None, reason="nvidia_resiliency_ext is not installed"
    ),
]

SLACK_S = 1.0
"""Scheduling allowance: four or more busy processes share two cores."""
PG_TIMEOUT_S = 5.0
CHECKPOINT = 25

INPROCESS = """
name = "nvrx-inprocess"
[workload]
kind = "ddp"
world_size = 3
steps = 100
pg_timeout_s = 5
[[faults]]
kind = "kill"
target = {{ ranks = [2] }}
trigger = {{ at_step = 40 }}
[recovery]
strategy = "nvrx-inprocess"
[recovery.nvrx-inprocess]
monitor_thread_interval_s = 0.2
monitor_process_interval_s = 0.2
progress_watchdog_interval_s = 0.2
last_call_wait_s = 0.2
soft_timeout_s = 2.0
hard_timeout_s = {hard}
checkpoint_every = 25
[launch]
interposer = "always"
[measure]
trials = {trials}
deadline_s = 60
{sweep}
"""
INTERVAL_S = 0.2
SOFT_S = 2.0
HARD_S = 8
"""Past the soft timeout, short enough that a kill test never waits on it."""

KILL_BOTH_WAYS = """
[sweep]
"faults.0" = [
    { kind = "kill", target = { ranks = [2] }, trigger = { at_step = 40 } },
    { kind = "nvrx-kill", target = { ranks = [2] }, trigger = { at_step = 40 } },
]
"""

STALL = """
[sweep]
"faults.0" = [{ kind = "stall", duration_s = 6, target = { ranks = [2] }, trigger = { at_step = 40 } }]
"""
STALL_S = 6.0
STALL_HARD_S = 30
"""Far past the stall: the stopped rank, once resumed, needs time to stamp progress again
while four processes share two cores (a hard timeout 2 s past the stall once fired in CI)."""


def by_fault(report: Any) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows(report):
        out.setdefault(r["fault"], []).append(r)
    return out


def trial_events(report: Any) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each trial's row with its events (rows and event folders share point and trial)."""
    folder = report.rundir.path / "events"
    return [(r, read_events(folder / r["point_hash"][:12] / str(r["trial"]))) for r in rows(report)]


def committed_before_detection(events: list[dict[str, Any]], row: dict[str, Any]) -> int:
    inject = next(e["t"] for e in events if e["event"] == "inject")
    t_detect = inject + row["ttd_s"] * 1e9
    return max(e["step"] for e in events if e["event"] == "step_end" and e["t"] < t_detect)


def fault_free_step_s(events: list[dict[str, Any]]) -> float:
    """The median time of the steps before the injection."""
    inject = next(e["t"] for e in events if e["event"] == "inject")
    return statistics.median(e["step_s"] for e in events if e["event"] == "step_end" and e["t"] < inject)


def check_inprocess_kill(row: dict[str, Any], events: list[dict[str, Any]]) -> None:
    assert row["outcome"] == "recovered", row
    assert 0 <= row["ttd_s"] < INTERVAL_S + INTERVAL_S + SLACK_S
    assert row["phase_abort_s"] >= INTERVAL_S, "NVRx aborts last_call_wait_s after it was told"
    phases = [v for k, v in row.items() if k.startswith("phase_") and v is not None]
    assert sum(phases) == pytest.approx(row["downtime_s"], rel=1e-6)
    assert row["steps_lost"] == committed_before_detection(events, row) - CHECKPOINT
    assert row["restore_bytes"] > 0
    steps = [e for e in events if e["event"] == "step_end"]
    before = {e["rank"]: e["pid"] for e in steps if e["gen"] == 0}
    after = {e["rank"]: e["pid"] for e in steps if e["gen"] == 1}
    assert after == {r: before[r] for r in (0, 1)}, "in-process: the survivors' own processes train on"
    assert {e["world_size"] for e in steps if e["gen"] == 1} == {2}


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_inprocess_kill_with_ftbench_and_nvrx_injectors(run_scenario, monkeypatch) -> None:
    monkeypatch.setenv("FTBENCH_PLUGINS", "tests.plugins.nvrx_inject")
    report = run_scenario(INPROCESS.format(trials=2, sweep=KILL_BOTH_WAYS, hard=HARD_S))
    assert report.status == "complete"
    for row, events in trial_events(report):
        check_inprocess_kill(row, events)
        victim = [e for e in events if e["event"] == "proc_exit" and e.get("of_rank") == 2]
        assert victim and victim[0]["exitcode"] == -9, "both injectors SIGKILL rank 2"
        check_recovery_time(row, events, fault_free_step_s(events))
    step_s = max(fault_free_step_s(events) for _, events in trial_events(report))
    trials = by_fault(report)
    ours, nvrx = trials["kill"], trials["nvrx-kill"]
    assert all(r["mechanism"] == "nvrx inject_fault: SIGKILL" for r in nvrx)
    med = lambda rs, key: statistics.median(r[key] for r in rs)
    # The same signal to the same process at the same step: detection differs by where in
    # the step it lands and by NVRx's polling of the dead rank.
    assert abs(med(ours, "ttd_s") - med(nvrx, "ttd_s")) < step_s + INTERVAL_S + SLACK_S
    # Steps lost: ftbench's kill lands anywhere in the target step (jitter) and NVRx's
    # injector at its own point of a step, each then detected up to a step later; one
    # step of spread per injector, so two trials' medians may differ by up to two steps.
    assert abs(med(ours, "steps_lost") - med(nvrx, "steps_lost")) <= 2


def check_recovery_time(row: dict[str, Any], events: list[dict[str, Any]], step_s: float) -> None:
    """Recovery follows one law whichever injector killed the rank. NVRx aborts
    ``last_call_wait_s`` after it is told and its barrier waits at most one monitor-process
    interval for the dead rank's stand-in, unless a survivor is stranded in a gloo
    collective with another survivor (it saw no error: its peer was alive). NVRx's abort
    cannot end that collective on gloo, so it returns at the process-group timeout only
    (``detect`` how ``timeout``). Where the kill lands in the step decides which case it is:
    ftbench's kill lands where the trigger fires, NVRx's at the victim's next collective."""
    stranded = any(e["event"] == "detect" and e.get("how") == "timeout" and e.get("src") == "rank" for e in events)
    if stranded:
        assert row["ttr_s"] >= PG_TIMEOUT_S - step_s - row["ttd_s"], row
    else:
        assert row["ttr_s"] < INTERVAL_S + INTERVAL_S + 2 * SLACK_S, row


@pytest.mark.timeout(120)
def test_inprocess_stall_is_seen_by_nvrx_before_gloo_but_gloo_cannot_be_aborted(run_scenario) -> None:
    report = run_scenario(INPROCESS.format(trials=1, sweep=STALL, hard=STALL_HARD_S))
    ((row, events),) = trial_events(report)
    assert row["outcome"] == "recovered", row
    assert row["detect_how"] == "nvrx_monitor_thread", "NVRx's soft timeout, not gloo, told the survivors"
    assert SOFT_S - 2 * INTERVAL_S <= row["ttd_s"] < SOFT_S + INTERVAL_S + SLACK_S < PG_TIMEOUT_S
    inject = next(e["t"] for e in events if e["event"] == "inject")
    since = lambda e: (e["t"] - inject) / 1e9
    for r in (0, 1):  # the survivors
        aborted = min(since(e) for e in events if e["event"] == "nvrx_abort_end" and e.get("rank") == r)
        finalized = min(since(e) for e in events if e["event"] == "nvrx_finalize_end" and e.get("rank") == r)
        assert aborted < PG_TIMEOUT_S - 1, "NVRx destroyed the process group early..."
        assert finalized > PG_TIMEOUT_S - 0.5, "...but the pending gloo collective returned at its timeout only"
    assert row["downtime_s"] >= STALL_S, "NVRx's iteration barrier waits for the stopped rank"
    final = [e for e in events if e["event"] == "step_end" and e["gen"] == 1]
    assert {e["world_size"] for e in final} == {3}, "not past its hard timeout: the victim rejoined"


LAUNCHER = """
name = "nvrx-launcher"
[workload]
kind = "ddp"
world_size = 2
steps = 100
pg_timeout_s = 5
[[faults]]
{fault}
target = {{ ranks = [1] }}
trigger = {{ at_step = 40 }}
[recovery]
strategy = "nvrx-launcher"
[recovery.nvrx-launcher]
rank_heartbeat_timeout_s = 2
initial_rank_heartbeat_timeout_s = 60
step_section_timeout_s = 2
rank_out_of_section_timeout_s = 60
workload_check_interval_s = 0.25
monitor_interval_s = 0.1
checkpoint_every = 25
[measure]
trials = 1
deadline_s = 60
{sweep}
"""
HEARTBEAT_S, CHECK_S, MONITOR_S = 2.0, 0.25, 0.1


@pytest.mark.timeout(90)
def test_launcher_kill_restarts_fresh_workers_from_the_checkpoint(run_scenario) -> None:
    report = run_scenario(LAUNCHER.format(fault='kind = "kill"', sweep=""))
    ((row, events),) = trial_events(report)
    assert row["outcome"] == "recovered", row
    assert row["ttd_s"] < MONITOR_S + SLACK_S
    assert row["phase_agent_s"] is not None, "ft_launcher's agent saw the dead worker"
    assert row["steps_lost"] == committed_before_detection(events, row) - CHECKPOINT
    assert {e["step"] for e in events if e["event"] == "restore_end"} == {CHECKPOINT}
    steps = [e for e in events if e["event"] == "step_end"]
    old = {e["pid"] for e in steps if e["gen"] == 0}
    new = {e["pid"] for e in steps if e["gen"] == 1}
    assert len(new) == 2 and not old & new, "a whole-group restart: fresh processes"
    phases = [v for k, v in row.items() if k.startswith("phase_") and v is not None]
    assert sum(phases) == pytest.approx(row["downtime_s"], rel=1e-6)
    assert row["phase_import_s"] > 0


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_launcher_stall_is_detected_by_rank_monitors_before_the_pg_timeout(run_scenario) -> None:
    sweep = '[sweep]\n"recovery.nvrx-launcher.hang_detection" = ["heartbeat", "sections"]'
    report = run_scenario(LAUNCHER.format(fault='kind = "stall"\nduration_s = 8', sweep=sweep))
    hows = set()
    for row, _events in trial_events(report):
        assert row["outcome"] == "recovered", row
        # The victim's last heartbeat (section close) was its last step, just before the stop.
        assert HEARTBEAT_S - 0.1 <= row["ttd_s"] < HEARTBEAT_S + CHECK_S + SLACK_S < PG_TIMEOUT_S
        hows.add(row["detect_how"])
        assert row["phase_agent_s"] is not None, "the monitor killed the worker, the agent restarted the group"
    assert hows == {"rank_monitor_heartbeat", "rank_monitor_section"}
