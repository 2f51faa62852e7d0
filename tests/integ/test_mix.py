"""The Llama 3 failure mix end to end at its smallest: two stacks meet the same seeded
schedule, the report counts what each met, and the projection check reads the run."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.procs.events import read_events
from bench.project.validate import check
from bench.report.mix import met
from bench.results.reader import load as load_run
from bench.run.runner import RunReport
from bench.scenario import mix
from bench.scenario.loader import load

pytestmark = [pytest.mark.integ, pytest.mark.slow]

SCENARIO = Path(__file__).parents[2] / "scenarios" / "llama3-mix.toml"


def small() -> str:
    """llama3-mix with 1,500 steps, an arrival every 3 s (6 in all), failstop and reinit."""
    text = SCENARIO.read_text()
    text = text.replace("steps = 15000", "steps = 1500")
    text = re.sub(r"mtbf_s = 30, count = 20", "mtbf_s = 3, count = 6", text)
    text = re.sub(r'"recovery.strategy" = \[.*\]', '"recovery.strategy" = ["failstop", "reinit"]', text)
    return text.replace("deadline_s = 900", "deadline_s = 240")


@pytest.mark.timeout(600)
def test_every_stack_meets_the_same_schedule_and_the_report_counts_it(
    run_scenario: Callable[[str], RunReport], write_scenario: Callable[..., Path]
) -> None:
    text = small()
    drawn = mix.of(load(write_scenario(text, "drawn.toml")).faults)
    assert drawn is not None
    schedule = sorted((t, i) for i, times in drawn.draw(21, 0).items() for t in times)
    report = run_scenario(text)
    run = load_run(report.rundir.path)
    for p in run.points():
        events = read_events(run.events_dir(p["point_hash"], 0))
        first = min(int(e["t"]) for e in events if e["event"] == "step_end")
        fired = sorted(
            (int(e["t"]), int(e["fault"])) for e in events if e["event"] in ("inject", "inject_skipped", "arm")
        )
        assert fired, p["label"]
        # The entries fired in the drawn order, each no earlier than its drawn moment.
        assert [i for _, i in fired] == [i for _, i in schedule[: len(fired)]], p["label"]
        for (t, _), (due, _) in zip(fired, schedule, strict=False):
            assert (t - first) / 1e9 >= due - 0.01, p["label"]
    table = met(run)
    assert table is not None
    assert sorted(set(table["stack"])) == ["failstop", "reinit"] and len(table) == 10
    reinit = table[table["stack"] == "reinit"]
    assert reinit["injected"].sum() + reinit["skipped"].sum() >= 2
    (failstop,) = [c for c in check(run, replicates=200) if c.strategy == "failstop"]
    assert failstop.reason  # nothing recovered: no loss per failure to predict with
    (checked,) = [c for c in check(run, replicates=200) if c.strategy == "reinit"]
    if checked.recovered:
        assert 0.0 < checked.measured[0] <= 1.05 and 0.0 < checked.predicted[0] <= 1.0, checked
    else:
        assert checked.reason
