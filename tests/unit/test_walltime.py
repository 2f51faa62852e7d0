"""The wall-time parts of a trial from hand-made event logs: consecutive, adding up to
the trial's wall time, and empty where a boundary is missing."""

from __future__ import annotations

import math

import pytest

from bench.results.walltime import WALL_PARTS, wall_parts, wall_summary

S = 1_000_000_000


def ev(event: str, t: float, src: str = "rank", **kw: object) -> dict[str, object]:
    return {"event": event, "t": int(t * S), "src": src, **kw}


def trial() -> list[dict[str, object]]:
    events = [ev("trial_start", 0, "harness")]
    for rank in range(2):
        events += [
            ev("proc_start", 1 + rank, rank=rank, pid=10 + rank),
            ev("import_done", 4 + rank, rank=rank, pid=10 + rank),
        ]
    for rank in range(2):
        for step in (1, 2, 3):
            events.append(ev("step_end", 6 + step, rank=rank, step=step, step_s=1.0))
    # a worker restarted after a fault: its start-up is part of the steps, not the import
    events += [ev("proc_start", 9.5, rank=1, pid=20, role="initial"), ev("import_done", 9.8, rank=1, pid=20)]
    events += [ev("proc_exit", 10, rank=0, pid=10), ev("trial_end", 12, "harness")]
    return events


def test_parts_are_consecutive_and_add_up_to_the_wall_time() -> None:
    parts = wall_parts(trial(), wall_s=12.5, warmup_steps=2)
    assert parts == pytest.approx(
        {
            "wall_launch_s": 1,  # to the first rank's proc_start
            "wall_import_s": 4,  # to the last first-process import (5 s), not the restarted worker's
            "wall_setup_s": 1,  # to the first step's start (7 - 1 s)
            "wall_warmup_s": 2,  # to the end of step 2 (8 s)
            "wall_steps_s": 2,  # to the last rank event (10 s)
            "wall_drain_s": 2,  # to trial_end
            "wall_analysis_s": 0.5,
        }
    )
    assert sum(parts.values()) == pytest.approx(12.5)


def test_a_missing_boundary_leaves_its_part_empty_and_the_sum_whole() -> None:
    events = [e for e in trial() if e["event"] != "import_done"]
    parts = wall_parts(events, wall_s=12.5, warmup_steps=2)
    assert math.isnan(parts["wall_import_s"])
    assert parts["wall_setup_s"] == pytest.approx(5)  # from the last boundary that exists
    assert sum(v for v in parts.values() if not math.isnan(v)) == pytest.approx(12.5)


def test_no_trial_start_no_parts() -> None:
    assert all(math.isnan(v) for v in wall_parts([], wall_s=1.0, warmup_steps=0).values())


def test_summary_medians_per_point_with_the_reference_apart() -> None:
    rows = [
        {"label": "p", "fault_index": 0, "fault": "kill", "trial_wall_s": 10.0, "wall_import_s": 4.0},
        {
            "label": "p",
            "fault_index": 1,
            "fault": "stall",
            "trial_wall_s": 99.0,
            "wall_import_s": 99.0,
        },  # a later fault of the same trial
        {"label": "p", "fault_index": 0, "fault": "kill", "trial_wall_s": 12.0, "wall_import_s": 6.0},
        {
            "label": "p",
            "fault_index": -1,
            "fault": "none",
            "reference": True,
            "trial_wall_s": 8.0,
            "wall_import_s": math.nan,
        },
    ]
    summary = wall_summary(rows)
    assert summary["p"] == {"trial_wall_s": 11.0, "wall_import_s": 5.0}
    assert summary["p (reference)"] == {"trial_wall_s": 8.0}
    assert set(WALL_PARTS) >= {"wall_import_s"}
