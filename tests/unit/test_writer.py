"""A run directory cut short: whole trials only, torn lines skipped, never a crash."""

from __future__ import annotations

import json
from pathlib import Path

from bench.results.reader import load
from bench.results.writer import RunDir


def row(point: str, trial: int, fault: int, rows: int = 2) -> dict[str, object]:
    return {
        "point_hash": point,
        "label": "p",
        "trial": trial,
        "reference": False,
        "fault_index": fault,
        "trial_rows": rows,
        "outcome": "recovered",
        "ttd_s": 0.01,
        "strategy": "reinit",
    }


def test_repair_keeps_whole_trials_and_drops_torn_lines(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.write_run_json({"scenario": {"name": "s", "raw": {}}, "points": [], "trials": 3})
    run.add_rows([row("a", 0, 0), row("a", 0, 1)])  # a whole trial of two faults
    run.add_rows([row("a", 1, 0), row("a", 1, 1)])
    with open(run.trials_jsonl, "a") as fh:
        fh.write(json.dumps(row("a", 2, 0)) + "\n")  # a trial cut after its first row...
        fh.write('{"point_hash": "a", "trial": 2, "fault_in')  # ...and a torn line
    assert run.finished() == {("a", 0, False), ("a", 1, False), ("a", 2, False)}
    notes = run.repair()
    assert any("torn" in n for n in notes) and any("1 of 2 rows" in n for n in notes), notes
    assert run.finished() == {("a", 0, False), ("a", 1, False)}
    assert len(run.rows()) == 4 and run.trials_jsonl.read_text().endswith("\n")


def test_readers_skip_a_torn_last_line_and_say_so(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.write_run_json({"scenario": {"name": "s", "raw": {}}, "points": [], "trials": 1})
    run.add_rows([row("a", 0, 0, rows=1)])
    with open(run.trials_jsonl, "a") as fh:
        fh.write('{"point_hash": "a", "tri')
    loaded = load(tmp_path)
    assert len(loaded.trials) == 1 and loaded.notes and "line 2" in loaded.notes[0]
