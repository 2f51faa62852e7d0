"""The first table ``ftbench run`` prints: per point only the figures its trials have,
units in a row of their own, and a plain line per point built from the figures."""

from __future__ import annotations

import re
from pathlib import Path

from bench.report.glance import first_table, table
from bench.results.reader import load
from tests.unit.runfactory import trial, write_run

FAILED = [trial(0.018 + i * 1e-3, inject_after_s=0.09) for i in range(5)]
RECOVERED = [trial(0.012, 0.019, inject_after_s=0.09) for _ in range(5)]


def test_no_column_or_row_is_empty_and_a_dash_is_a_figure_the_points_trials_lack(tmp_path: Path) -> None:
    run = load(write_run(tmp_path, "kill", {"strategy=failstop": FAILED, "strategy=reinit": RECOVERED}, steps=True))
    frame, numbers = table(run)
    units, body = frame.iloc[0], frame.iloc[1:]
    assert numbers == [
        *("ttd", "ttd_all", "ttr", "downtime", "steps_lost", "goodput"),
        *("isolate", "reconfigure", "catchup"),  # the phases the points have, not restore
    ]
    assert list(units[numbers]) == ["(ms)"] * 4 + ["(steps)", "(%)"] + ["(ms)"] * 3
    for head in numbers:
        assert (body[head] != "-").any(), f"column {head} is empty for every point"
    for _, row in body.iterrows():
        assert (row[numbers] != "-").any(), f"row {row['point']} is empty"
    figure = {"ttr": "ttr_s", "downtime": "downtime_s", "steps_lost": "steps_lost", "isolate": "phase_isolate_s"}
    for _, row in body.iterrows():
        h = next(p["point_hash"] for p in run.points() if p["label"] == row["point"])
        for head, column in figure.items():
            assert (row[head] == "-") == (not run.values(h, column)), (row["point"], head)
    failstop, reinit = body.iloc[0], body.iloc[1]
    assert failstop["outcome"] == "failed 5" and failstop["ttd"] == "20.0" and failstop["ttr"] == "-"
    assert reinit["ttr"] == "19.0" and reinit["downtime"] == "31.0" and reinit["goodput"] == "80.0"


def test_the_plain_lines_say_what_happened_and_when_from_the_figures(tmp_path: Path) -> None:
    run = load(write_run(tmp_path, "kill", {"strategy=failstop": FAILED, "strategy=reinit": RECOVERED}, steps=True))
    text = first_table(run)
    assert (
        "strategy=failstop: the kill of rank 2 was noticed after 20 ms (by every survivor after 22 ms); "
        "then the job stopped (failed in 5 of 5 trials)"
    ) in text
    assert (
        "strategy=reinit: the kill of rank 2 was noticed after 12 ms; training again 19 ms later in 3 ranks, "
        "no step lost (recovered in 5 of 5 trials)"
    ) in text
    head, units = text.splitlines()[:2]
    ends = [m.end() for m in re.finditer(r"\S+", head)][2:]  # past point and outcome
    assert ends == [m.end() for m in re.finditer(r"\S+", units)], "each unit right under its figure's name"


def test_a_figure_only_some_trials_have_says_how_many_and_a_unit_fits_its_column(tmp_path: Path) -> None:
    mixed = [trial(0.012, 0.019) for _ in range(3)] + [trial(0.015)]
    restart = [trial(0.020, 5.2) for _ in range(3)]
    run = load(write_run(tmp_path, "mix", {"strategy=reinit": mixed, "strategy=restart": restart}))
    frame, _ = table(run)
    assert frame["ttr"].tolist() == ["(s)", "0.019 (3)", "5.200"]
    assert frame["ttd"].tolist()[0] == "(ms)"
    text = first_table(run)
    assert "(recovered in 3 of 4 trials, failed in 1)" in text
    assert "training again 19 ms later, no step lost" in text, "no steps.csv: the world is not said"
