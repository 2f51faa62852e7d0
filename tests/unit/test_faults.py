"""Fault targets and triggers: validation, and the schedule against real processes."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.procs.events import EventWriter, read_events
from bench.run.schedule import ScheduledFault, TrialState
from bench.scenario.config import ConfigError
from bench.scenario.loader import load

BASE = """
[workload]
world_size = 4
steps = 100
[launch]
ranks_per_host = {rph}
[[faults]]
kind = "{kind}"
{params}
target = {target}
trigger = {trigger}
"""


def scenario(
    write_scenario, *, kind="kill", params="", target="{ ranks = [1] }", trigger="{ at_step = 10 }", rph=1, extra=""
):
    text = BASE.format(kind=kind, params=params, target=target, trigger=trigger, rph=rph) + extra
    return load(write_scenario(text))


@pytest.mark.parametrize(
    ("change", "key", "expected"),
    [
        (dict(target="{ ranks = [1], one = true }"), "faults.0.target", "exactly one of"),
        (dict(target="{ }"), "faults.0.target", "exactly one of"),
        (dict(target="{ fraction = 1.0 }"), "faults.0.target.fraction", "< 1"),
        (dict(target="{ host = 2 }", rph=2), "faults.0.target.host", "a host below 2"),
        (dict(target="{ host = 0 }", rph=4), "faults.0.target.host", "more than one host"),
        (dict(rph=3), "launch.ranks_per_host", "a divisor"),
        (dict(target='{ component = "dns" }'), "faults.0.target.component", "'store'"),
        (
            dict(kind="hang", params="duration_s = 1", target='{ component = "store" }'),
            "faults.0.target.component",
            "acts on ranks",
        ),
        (dict(trigger="{ at_step = 5, count = 2 }"), "faults.0.trigger.count", "1 with at_step"),
        (dict(trigger="{ every_s = 0 }"), "faults.0.trigger.every_s", "> 0"),
        (dict(trigger="{ probability = 1.5 }"), "faults.0.trigger.probability", "<= 1"),
        (dict(kind="straggler", params="delay_s = 0.1"), "faults.0.duration_s", "required"),
        (dict(kind="bitflip", params='when = "later"'), "faults.0.when", "'after_reduce'"),
    ],
)
def test_bad_targets_and_triggers(write_scenario, change, key, expected) -> None:
    with pytest.raises(ConfigError) as info:
        scenario(write_scenario, **change)
    assert info.value.key == key, str(info.value)
    assert expected in str(info.value)


@pytest.fixture
def ranks() -> Iterator[list[subprocess.Popen]]:
    """Four real processes standing in for ranks (the schedule only signals pids)."""
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def state_of(procs: list[subprocess.Popen], max_step: int = 0, first_step_t: int | None = None) -> TrialState:
    st = TrialState(pids={r: p.pid for r, p in enumerate(procs)}, max_step=max_step, first_step_t=first_step_t)
    return st


def test_one_random_live_rank_is_seeded_and_really_killed(write_scenario, ranks, tmp_path: Path) -> None:
    spec = scenario(write_scenario, target="{ one = true }").faults[0]
    firsts = []
    for trial in (3, 3, 4, 5, 6):
        fault = ScheduledFault(0, spec, seed=7, trial=trial, ranks_per_host=1)
        st = state_of(ranks, max_step=10)
        st.exited.add(ranks[0].pid)  # rank 0 is gone: it must never be drawn
        firsts.append(fault._targets(st)[0])
    assert firsts[0] == firsts[1], "same seed and trial: same victim"
    assert all(len(f) == 1 and f[0] in (1, 2, 3) for f in firsts)
    fault = ScheduledFault(0, spec, seed=7, trial=3, ranks_per_host=1)
    st = state_of(ranks, max_step=10)
    st.exited.add(ranks[0].pid)
    fault.poll(st, time.monotonic_ns(), EventWriter(tmp_path / "h.jsonl", src="harness"))
    (inj,) = [e for e in read_events(tmp_path) if e["event"] == "inject"]
    assert inj["ranks"] == firsts[0] and inj["signalled"] == [ranks[firsts[0][0]].pid]
    assert ranks[firsts[0][0]].wait(timeout=5) == -9  # SIGKILL, for real


def test_host_target_hits_every_rank_of_the_host(write_scenario, ranks, tmp_path: Path) -> None:
    spec = scenario(write_scenario, target="{ host = 1 }", rph=2).faults[0]
    fault = ScheduledFault(0, spec, seed=0, trial=0, ranks_per_host=2)
    fault.poll(state_of(ranks, max_step=10), time.monotonic_ns(), EventWriter(tmp_path / "h.jsonl", src="harness"))
    assert [ranks[2].wait(timeout=5), ranks[3].wait(timeout=5)] == [-9, -9]
    assert ranks[0].poll() is None and ranks[1].poll() is None


def test_mtbf_schedule_is_reproducible_and_bounded_by_count(write_scenario, ranks, tmp_path: Path) -> None:
    spec = scenario(
        write_scenario,
        kind="stall",
        params="duration_s = 0.01",
        target="{ ranks = [1] }",
        trigger="{ mtbf_s = 0.02, count = 3 }",
    ).faults[0]
    a = ScheduledFault(0, spec, seed=1, trial=0, ranks_per_host=1)
    b = ScheduledFault(0, spec, seed=1, trial=0, ranks_per_host=1)
    c = ScheduledFault(0, spec, seed=1, trial=1, ranks_per_host=1)
    assert a._arrivals == b._arrivals != c._arrivals
    assert a._arrivals == sorted(a._arrivals) and len(a._arrivals) == 3
    harness = EventWriter(tmp_path / "h.jsonl", src="harness")
    start = time.monotonic_ns()
    st = state_of(ranks, max_step=1, first_step_t=start)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (a.fired < 3 or any(f.undo_at for f in a.firings)):
        a.poll(st, time.monotonic_ns(), harness)
        time.sleep(0.002)
    events = read_events(tmp_path)
    injects = [e for e in events if e["event"] == "inject"]
    assert len(injects) == 3 and len([e for e in events if e["event"] == "fault_end"]) == 3
    offsets = [(e["t"] - start) / 1e9 for e in injects]
    assert all(off >= arrival for off, arrival in zip(offsets, a._arrivals, strict=True))
    assert ranks[1].poll() is None  # stalled three times, resumed three times, still alive


def test_probability_trigger_fires_at_most_count_times(write_scenario, ranks, tmp_path: Path) -> None:
    spec = scenario(
        write_scenario, kind="stall", params="duration_s = 0.001", trigger="{ probability = 1.0, count = 2 }"
    ).faults[0]
    fault = ScheduledFault(0, spec, seed=0, trial=0, ranks_per_host=1)
    harness = EventWriter(tmp_path / "h.jsonl", src="harness")
    for step in range(1, 6):
        fault.poll(state_of(ranks, max_step=step, first_step_t=1), time.monotonic_ns(), harness)
        time.sleep(0.002)
        fault.poll(state_of(ranks, max_step=step, first_step_t=1), time.monotonic_ns(), harness)
    assert fault.fired == 2


def test_a_target_without_live_process_is_skipped_with_a_reason(write_scenario, tmp_path: Path) -> None:
    lighthouse = '{ component = "lighthouse" }'  # torchft's: the strategy must have one
    spec = scenario(write_scenario, target=lighthouse, extra='[recovery]\nstrategy = "torchft"\n').faults[0]
    fault = ScheduledFault(0, spec, seed=0, trial=0, ranks_per_host=1)
    fault.poll(TrialState(max_step=20), time.monotonic_ns(), EventWriter(tmp_path / "h.jsonl", src="harness"))
    (e,) = read_events(tmp_path)
    assert e["event"] == "inject_skipped" and "no live process" in e["reason"]


def test_step_jitter_fires_within_one_step_of_the_trigger(write_scenario, ranks, tmp_path: Path) -> None:
    """jitter = "step": the firing waits a uniformly drawn part of the current step time
    (seeded), so injections land anywhere in a step; the wait is recorded."""
    spec = scenario(
        write_scenario, kind="stall", params="duration_s = 5", trigger='{ at_step = 10, jitter = "step" }'
    ).faults[0]
    waits = []
    for trial in range(6):
        fault = ScheduledFault(0, spec, seed=1, trial=trial, ranks_per_host=1)
        st = state_of(ranks, max_step=10)
        st.step_times.extend([0.2] * 5)  # the ranks' recent step time: 200 ms
        harness = EventWriter(tmp_path / f"h{trial}.jsonl", src="harness")
        t0 = time.monotonic_ns()
        fault.poll(st, t0, harness)  # the trigger is met: the firing is scheduled, not done
        assert fault.fired == 0 and fault.busy()
        while not fault.fired:
            fault.poll(st, time.monotonic_ns(), harness)
        fault.undo_all(harness)
        (inj,) = [e for e in read_events(tmp_path) if e["event"] == "inject" and e["t"] >= t0]
        assert 0 <= inj["jitter_s"] <= 0.2 and inj["t"] - t0 >= inj["jitter_s"] * 1e9
        waits.append(inj["jitter_s"])
        for f in tmp_path.glob("h*.jsonl"):
            f.unlink()
    assert len(set(waits)) == len(waits), "each trial draws its own moment"
    again = ScheduledFault(0, spec, seed=1, trial=0, ranks_per_host=1)
    st = state_of(ranks, max_step=10)
    st.step_times.extend([0.2] * 5)
    again.poll(st, 0, EventWriter(tmp_path / "x.jsonl", src="harness"))
    assert again._jitter_s == waits[0], "the draw is seeded by (seed, trial, fault)"


def test_step_jitter_is_laid_from_the_step_boundary_so_phases_are_uniform(write_scenario, tmp_path: Path) -> None:
    """The harness sees a step end late (here 37 ms into a 10 ms-period job whose steps
    compute for 6 ms): the point is drawn over the whole period, not the step time, and
    laid from the ranks' step boundary carried forward, never from the moment the trigger
    was seen, so the phase it lands at is the draw itself, uniform over the step."""
    spec = scenario(write_scenario, kind="stall", params="duration_s = 5", trigger='{ at_step = 10, jitter = "step" }')
    period = 10_000_000
    phases = []
    for trial in range(400):
        fault = ScheduledFault(0, spec.faults[0], seed=3, trial=trial, ranks_per_host=1)
        st = TrialState()
        for step in range(1, 11):
            for rank in (0, 1):
                end = {"event": "step_end", "src": "rank", "rank": rank, "step": step, "t": step * period + rank * 1000}
                st.feed(end | {"step_s": 0.006})  # 6 ms of computing a step, 4 ms between steps
        assert st.period_s() == pytest.approx(0.01)
        now = 10 * period + 37_000_000
        fire_at, jitter = fault._moment(st, now)
        assert fire_at >= now and 0 <= jitter <= 0.01
        phases.append(((fire_at - (10 * period + 1000)) % period) / period)
    # 400 uniform draws: each quarter of the step holds 100 +- 8.7 (one s.d.); 60 is 4.6 s.d. away.
    counts = [sum(q / 4 <= p < (q + 1) / 4 for p in phases) for q in range(4)]
    assert all(60 <= c <= 140 for c in counts), counts
