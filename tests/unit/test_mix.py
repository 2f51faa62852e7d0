"""A failure mix: one seeded arrival process picking fault entries by share."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.procs.events import EventWriter, read_events
from bench.run.schedule import TrialState, schedule
from bench.scenario import mix
from bench.scenario.config import ConfigError, to_dict
from bench.scenario.loader import load
from bench.scenario.model import Scenario

Writer = Callable[..., Path]

MIX = """
[workload]
world_size = 4
steps = 100
[[faults]]
kind = "stall"
duration_s = 0.01
target = {{ ranks = [1] }}
trigger = {first}
[[faults]]
kind = "stall"
duration_s = 0.01
target = {{ ranks = [2] }}
trigger = {second}
[[faults]]
kind = "kill"
target = {{ ranks = [3] }}
trigger = {{ after_s = 1000 }}
[recovery]
strategy = "{strategy}"
[measure]
deadline_s = 3000
"""


def mixed(write_scenario: Writer, first: str, second: str, strategy: str = "reinit") -> Scenario:
    return load(write_scenario(MIX.format(first=first, second=second, strategy=strategy)))


@pytest.mark.parametrize(
    ("first", "second", "key", "expected"),
    [
        (
            "{ at_step = 5, share = 1 }",
            "{ mtbf_s = 1, share = 1 }",
            "faults.0.trigger.share",
            "only with trigger.mtbf_s",
        ),
        ("{ mtbf_s = 1, share = 1 }", "{ mtbf_s = 2, share = 1 }", "faults.1.trigger.mtbf_s", "1.0 as in faults.0"),
        (
            "{ mtbf_s = 1, count = 3, share = 1 }",
            "{ mtbf_s = 1, share = 1 }",
            "faults.1.trigger.count",
            "3 as in faults.0",
        ),
        (
            '{ mtbf_s = 1, share = 1, jitter = "step" }',
            "{ mtbf_s = 1, share = 1 }",
            "faults.1.trigger.jitter",
            "'step' as in faults.0",
        ),
        ("{ mtbf_s = 1, share = 0 }", "{ mtbf_s = 1, share = 1 }", "faults.0.trigger.share", "> 0"),
        ("{ mtbf_s = 1, share = -3 }", "{ mtbf_s = 1, share = 1 }", "faults.0.trigger.share", "> 0"),
    ],
)
def test_a_mix_is_refused_naming_the_key(
    write_scenario: Writer, first: str, second: str, key: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        mixed(write_scenario, first, second)
    assert info.value.key == key, str(info.value)
    assert expected in str(info.value)
    assert "s.toml" in str(info.value)


def test_shares_are_normalised_and_only_entries_with_one_belong(write_scenario: Writer) -> None:
    sc = mixed(write_scenario, "{ mtbf_s = 2, count = 9, share = 30.1 }", "{ mtbf_s = 2, count = 9, share = 10.0 }")
    found = mix.of(sc.faults)
    assert found is not None and found.count == 9 and found.mtbf_s == 2.0
    assert [m.index for m in found.members] == [0, 1]
    shares = found.normalised()
    assert shares[0] == pytest.approx(30.1 / 40.1) and sum(shares.values()) == pytest.approx(1.0)
    assert "faults.0 stall 75.1 %" in found.text()
    # What run.json records of the faults reads back as the same mix.
    assert mix.from_config([to_dict(f) for f in sc.faults]) == found
    assert mix.of(sc.faults[2:]) is None


def test_the_schedule_depends_on_seed_and_trial_only_and_follows_the_shares(write_scenario: Writer) -> None:
    text = ("{ mtbf_s = 3, count = 4000, share = 3 }", "{ mtbf_s = 3, count = 4000, share = 1 }")
    a = mix.of(mixed(write_scenario, *text, strategy="reinit").faults)
    b = mix.of(mixed(write_scenario, *text, strategy="failstop").faults)
    assert a is not None and b is not None
    drawn = a.draw(seed=5, trial=2)
    assert drawn == b.draw(seed=5, trial=2)  # another stack meets the same schedule
    assert drawn != a.draw(seed=5, trial=3) and drawn != a.draw(seed=6, trial=2)
    times = sorted(t for ts in drawn.values() for t in ts)
    assert len(times) == 4000 and len(set(times)) == 4000
    assert all(ts == sorted(ts) for ts in drawn.values())
    # 4000 draws at p = 0.75: the binomial's standard deviation is 27 draws.
    assert abs(len(drawn[0]) - 3000) < 5 * 27
    # Exponential gaps of mean 3 s: the mean of 4000 is within 5 % of it.
    assert times[-1] / 4000 == pytest.approx(3.0, rel=0.05)


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_each_arrival_fires_the_entry_it_drew_at_its_moment(
    write_scenario: Writer, sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    sc = mixed(write_scenario, "{ mtbf_s = 0.03, count = 8, share = 1 }", "{ mtbf_s = 0.03, count = 8, share = 1 }")
    faults = schedule(sc.faults, seed=4, trial=0, ranks_per_host=1)
    found = mix.of(sc.faults)
    assert found is not None
    drawn = found.draw(4, 0)
    assert [f.limit for f in faults[:2]] == [len(drawn[0]), len(drawn[1])] and all(drawn.values())
    assert faults[2].limit == 1  # not in the mix: its own trigger, untouched
    harness = EventWriter(tmp_path / "h.jsonl", src="harness")
    start = time.monotonic_ns()
    state = TrialState(pids={r: p.pid for r, p in enumerate(sleepers)}, max_step=1, first_step_t=start)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(f.busy() for f in faults[:2]):
        for f in faults[:2]:
            f.poll(state, time.monotonic_ns(), harness)
        time.sleep(0.001)
    injects = [e for e in read_events(tmp_path) if e["event"] == "inject"]
    assert Counter(int(e["fault"]) for e in injects) == {i: len(ts) for i, ts in drawn.items() if ts}
    for i, times in drawn.items():
        offsets = [(e["t"] - start) / 1e9 for e in injects if e["fault"] == i]
        assert all(off >= t for off, t in zip(offsets, times, strict=True))
    assert all(p.poll() is None for p in sleepers)  # stalled and resumed, never killed


def test_the_report_counts_per_stack_the_faults_met_by_entry_and_their_outcomes(tmp_path: Path) -> None:
    from bench.report.blocks import Report
    from bench.report.mix import met, section
    from bench.results.reader import load as load_run
    from tests.unit.runfactory import point_hash, write_run

    def entry(kind: str, share: float, **params: object) -> dict[str, object]:
        trigger = {"mtbf_s": 30.0, "count": 20, "share": share, "jitter": "none"}
        return {"kind": kind, "target": {"one": True}, "trigger": trigger, "params": params}

    faults = [entry("kill", 3.0, signal="SIGKILL"), entry("stall", 1.0, duration_s=8.0)]
    path = write_run(
        tmp_path,
        "llama3-mix",
        {
            "strategy=reinit": [
                {"fault_index": 0, "outcome": "recovered", "downtime_s": 1.0},
                {"fault_index": 0, "outcome": "recovered", "downtime_s": 3.0},
                {"fault_index": 1, "fault": "stall", "outcome": "failed", "downtime_s": None},
            ],
            "strategy=restart": [
                {"fault_index": 0, "outcome": "recovered", "downtime_s": 12.0},
                {"fault_index": 1, "fault": "stall", "outcome": "not_injected", "downtime_s": None},
            ],
        },
        config={"faults": faults},
    )
    skipped = path / "events" / point_hash("strategy=restart")[:12] / "0" / "harness.jsonl"
    skipped.parent.mkdir(parents=True)
    skipped.write_text('{"t": 5, "event": "inject_skipped", "fault": 0, "reason": "no live process to hit"}\n{"t": 6')
    table = met(load_run(path))
    assert table is not None
    rows = {(r["stack"], r["entry"]): r for r in table.to_dict("records")}
    kill = rows[("reinit", "faults.0 kill (signal SIGKILL)")]
    assert (kill["share"], kill["injected"], kill["skipped"], kill["outcomes"]) == ("75.0 %", 2, 0, "recovered 2")
    assert kill["downtime_s"] == "2 s [1 s-3 s]"
    assert rows[("reinit", "faults.1 stall (duration_s 8.0)")]["outcomes"] == "failed 1"
    never = rows[("restart", "faults.1 stall (duration_s 8.0)")]
    assert (never["injected"], never["outcomes"], never["downtime_s"]) == (0, "-", "-")
    assert rows[("restart", "faults.0 kill (signal SIGKILL)")]["skipped"] == 1  # the torn line is left out
    rep = Report()
    section(rep, [load_run(path)])
    assert [b.kind for b in rep.blocks] == ["h2", "p", "table"]
    without = write_run(tmp_path / "plain", "chaos", {"strategy=reinit": [{"outcome": "recovered"}]})
    assert met(load_run(without)) is None
