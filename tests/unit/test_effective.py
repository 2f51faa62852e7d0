"""The measured effective training time of a chaos trial, from hand-made event logs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from bench.results.effective import _cycle_of, measure

NS = 1_000_000_000
STEP = 0.1


def steps(
    gen: int, first: int, last: int, start_s: float, ranks: list[int], every: float = STEP
) -> list[dict[str, Any]]:
    """Steps ``first..last`` of one generation, one every ``every`` s from ``start_s`` on every rank."""
    out = []
    for k, step in enumerate(range(first, last + 1), start=1):
        t = round((start_s + k * every) * NS)
        for r in ranks:
            out.append(
                {"t": t, "event": "step_end", "src": "rank", "rank": r, "gen": gen, "step": step, "step_s": every}
                | {"world_size": len(ranks)}
            )
    return out


def trial() -> list[dict[str, Any]]:
    """Four ranks run steps 1-10; rank 3 is killed at 1.05 s; three ranks roll back to
    the checkpoint of step 8 and run steps 9-20 from 3.0 s (9 and 10 again)."""
    events = steps(0, 1, 10, 0.0, [0, 1, 2, 3]) + steps(1, 9, 20, 3.0, [0, 1, 2])
    events += [
        {"t": int(0.45 * NS), "event": "checkpoint", "src": "rank", "rank": 0, "gen": 0, "step": 4, "blocked_s": 0.05},
        {"t": int(0.85 * NS), "event": "checkpoint", "src": "rank", "rank": 0, "gen": 0, "step": 8, "blocked_s": 0.05},
        {"t": int(1.05 * NS), "event": "inject", "src": "harness", "fault": 0, "kind": "kill", "ranks": [3]},
    ]
    return sorted(events, key=lambda e: e["t"])


def test_distinct_steps_at_their_world_over_wall_time() -> None:
    eff = measure(trial(), steps=20, warmup_steps=2, world=4)
    assert eff is not None
    assert eff.ff_step_s == pytest.approx(STEP)
    assert eff.steps_done == 20
    assert eff.wall_s == pytest.approx(4.2)  # first step's start (0 s) to the last rank event (4.2 s)
    # Steps 1-8 by four ranks (0.8 s of work), 9-20 last made by three (12 x 0.75 x 0.1 s).
    assert eff.useful_s == pytest.approx(0.8 + 0.9)
    assert eff.value == pytest.approx(1.7 / 4.2)
    first, second = eff.cycles
    assert first.fault is None and second.fault == 0
    assert first.wall_s == pytest.approx(1.05) and second.wall_s == pytest.approx(3.15)
    # Steps 9 and 10 of the first world were replayed: their work is booked where it stuck.
    assert first.useful_s == pytest.approx(0.8) and second.useful_s == pytest.approx(0.9)
    assert first.degraded_s == 0 and second.degraded_s == pytest.approx(12 * 0.25 * STEP)
    assert eff.saves == 2 and eff.checkpoint_s == pytest.approx(0.1)
    assert eff.save_gaps_s == pytest.approx((0.35,))  # end of one save to the next, less the write
    assert math.isnan(eff.slowdown)  # no full-world step after the fault


def test_full_world_steps_after_the_fault_give_the_slowdown_and_the_slow_time() -> None:
    # The world is whole again from 6.2 s: an opening step of 1 s, then 16 steps of 0.15 s.
    late = steps(2, 21, 37, 6.2, [0, 1, 2, 3], every=0.15)
    for e in late:
        e["step_s"] = 1.0 if e["step"] == 21 else 0.15
    eff = measure(trial() + late, steps=37, warmup_steps=2, world=4)
    assert eff is not None
    assert eff.pre_step_s == pytest.approx(STEP) and eff.slowdown == pytest.approx(1.5)
    # Full-world steps past warmup, each world's first aside: eight of 0.1 s, sixteen of 0.15 s.
    ff = (8 * 0.1 + 16 * 0.15) / 24
    assert eff.ff_step_s == pytest.approx(ff)
    # Each cycle against its own full-world steps: the first ran at 0.1 s, the second's
    # full world at 0.15 s; three-rank steps are worth three quarters of what they took,
    # and are never slow. Opening steps (1, 21) are worth a step but are not slow either.
    assert eff.slow_s == pytest.approx(0.0, abs=1e-12)
    assert eff.cycles[1].useful_s == pytest.approx(12 * 0.75 * 0.1 + 17 * 0.15)


def test_a_fault_free_trial_measures_about_one_whatever_its_tail() -> None:
    # Thirty steps of 0.1 s, one of them held 0.5 s longer (the shared machine's load).
    events = steps(0, 1, 30, 0.0, [0, 1, 2, 3])
    for e in events:
        if e["step"] >= 15:
            e["t"] += int(0.5 * NS)
    eff = measure(events, steps=30, warmup_steps=2, world=4)
    assert eff is not None
    mean = (27 * STEP + 0.6) / 28  # steps 3-30 (1 opens the world, 2 is warmup)
    assert eff.ff_step_s == pytest.approx(mean)
    assert eff.value == pytest.approx(30 * mean / 3.5)  # 1.01; the median (0.1 s) would say 0.86
    assert eff.slow_s == pytest.approx(28 * STEP + 0.6 - 29 * mean)  # steps 2-30 against the mean


def test_no_figure_without_a_fault_free_step_time() -> None:
    assert measure(trial(), steps=20, warmup_steps=10, world=4) is None  # no full-world step past warmup
    assert measure([], steps=20, warmup_steps=2, world=4) is None


@pytest.mark.parametrize(("t", "cycle"), [(0, 0), (9, 0), (10, 1), (19, 1), (20, 2), (30, 2), (99, 2)])
def test_a_stamp_belongs_to_the_cycle_it_falls_in(t: int, cycle: int) -> None:
    assert _cycle_of([0, 10, 20, 30], t) == cycle


def test_work_done_inside_a_recovery_is_counted_where_it_ended() -> None:
    import numpy as np

    from bench.project.validate import Injection, _within

    eff = measure(trial(), steps=20, warmup_steps=2, world=4)
    assert eff is not None and [t for t, _ in eff.work] == sorted(t for t, _ in eff.work)
    assert sum(w for _, w in eff.work) == pytest.approx(eff.useful_s)

    def fault(downtime_s: float, outcome: str = "recovered") -> Injection:
        return Injection(
            t_ns=int(1.05 * NS),
            outcome=outcome,
            phases=np.zeros(0),
            downtime_s=downtime_s,
            degraded_s=0.0,
            overlapped=False,
        )

    # Recovered at 3.25 s: steps 9 and 10 of the three-rank world (3.1 s, 3.2 s) ended inside.
    assert _within(eff, [fault(2.2)]) == pytest.approx(2 * 0.75 * STEP)
    assert _within(eff, [fault(1.0)]) == 0.0  # nothing trained between 1.05 s and 2.05 s
    assert _within(eff, [fault(2.2, outcome="failed")]) == 0.0


def test_the_check_page_sets_measured_beside_predicted(tmp_path: Path) -> None:
    from bench.project.validate import Check
    from bench.project.validate_page import parts_table, table, write
    from bench.results.reader import Run

    done = Check(label="strategy=restart", strategy="restart", wall_s=426.0, injected=10, recovered=9)
    done.rate_per_s, done.lost_s = 10 / 426.0, 14.4
    done.measured, done.predicted, done.error = (0.661, 0.526, 0.746), (0.745, 0.674, 0.798), (-0.084, -0.147, -0.052)
    done.model_shares, done.measured_shares = {"recover": 0.238}, {"recover": 0.287, "slower steps": -0.001}
    done.notes = ["differ by -8.4 points [-14.7, -5.2]"]
    none = Check(label="strategy=failstop", strategy="failstop", reason="no injected fault recovered")
    row = table([done, none]).to_dict("records")
    assert row[0]["measured E"] == "66.1 % [52.6, 74.6]" and row[0]["error (points)"] == "-8.4 [-14.7, -5.2]"
    assert row[1]["measured E"] == "-" and row[1]["note"] == "no injected fault recovered"
    parts = parts_table([done, none])
    assert set(parts["strategy"]) == {"restart"}  # a point without a check has no parts
    recover = parts[parts["part"] == "recover"].iloc[0]
    assert (recover["model"], recover["measured"], recover["difference (points)"]) == ("23.8 %", "28.7 %", "+4.9")
    page = write([done, none], Run(path=tmp_path / "chaos" / "run", info={}, trials=pd.DataFrame()), tmp_path)
    text = page.read_text()
    assert "| restart | 7.1 min |" in text and "**failstop**: no injected fault recovered" in text
