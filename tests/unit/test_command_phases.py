"""A command job's recovery phases, from the probe's raw records of a torchrun restart:
the job's own model wrapping (``build``) and checkpoint load (``restore``) are phases of
their own, its first step after the restart another, and ``catchup`` holds only the
steps it lost.

The records follow what the probe writes in a real trial (tests/integ/test_job_cli.py
runs ``examples/ddp/train.py`` so): two ranks step every 10 ms, rank 1 is killed after
step 30, rank 0's backward raises, torchrun's agent restarts both, and the new workers
form a process group, wrap their model in DDP, load the checkpoint and train on, rank 0
printing ``step N`` after each step.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.results.derive import fault_figures
from bench.results.facts import FaultFigures
from bench.scenario.strategy import STRATEGIES
from bench.strategies.command.progress import parse as parse_progress
from bench.strategies.command.translate import translate

MS = 1_000_000
STEPS = 60
BUILD_MS, LOAD_START_MS, LOAD_END_MS, PG_MS, FIRST_MS = 3000.0, 3010.0, 3030.0, 2500.0, 3100.0


def rec(t_ms: float, event: str, rank: int, pid: int, **fields: Any) -> dict[str, Any]:
    return {"t": round(t_ms * MS), "event": event, "src": "rank", "rank": rank, "pid": pid, **fields}


def restarted(
    resume_at: int, *, build: bool = True, load: bool = True, load_first: bool = False, printed: bool = True
) -> tuple[list[dict[str, Any]], list[tuple[int, str, str]]]:
    """Events and rank 0's output of a trial whose restarted job resumes at ``resume_at``
    (31: it lost nothing). ``load_first``: it loads the checkpoint before it wraps its
    model, as a job that loads into the bare model does."""
    events: list[dict[str, Any]] = []
    out: list[tuple[int, str, str]] = []
    for s in range(1, 31):  # generation 0: step s ends at 10 s ms
        events += [rec(10 * s + 0.1 * r, "step_end", r, 100 + r, step=s, count=s, gen=0, step_s=0.01) for r in (0, 1)]
        out.append((round((10 * s + 0.5) * MS), "out", f"step {s} loss 1.0"))
    events.append({"t": 305 * MS, "event": "inject", "src": "harness", "fault": 0, "kind": "kill", "ranks": [1]})
    events.append(rec(310, "raised", 0, 100, site="backward", type="RuntimeError", error="Connection reset by peer"))
    events.append({"t": 320 * MS, "event": "detect", "src": "agent", "pid": 50, "how": "agent_monitor"})
    build_ms, load_ms = (LOAD_END_MS + 10, BUILD_MS) if load_first else (BUILD_MS, LOAD_START_MS)
    for r in (0, 1):
        pid = 200 + r
        events += [rec(2000 + r, "import_done", r, pid), rec(PG_MS + r, "pg_ready", r, pid, gen=1)]
        events.append(rec(PG_MS + r, "reconfigured", r, pid, gen=1))
        if build:
            events.append(rec(build_ms + r, "model_wrapped", r, pid, gen=1, how="DistributedDataParallel"))
        if load:
            events.append(rec(load_ms + r, "restore_start", r, pid, gen=1, how="torch.load"))
            events.append(rec(load_ms + 20 + r, "restore_end", r, pid, gen=1, how="torch.load", bytes=1000))
        for count, s in enumerate(range(resume_at, STEPS + 1), start=1):
            events.append(rec(FIRST_MS + 10 * count + 0.1 * r, "step_end", r, pid, step=count, count=count, gen=1,
                              step_s=0.01))  # fmt: skip
            if r == 0 and printed:
                out.append((round((FIRST_MS + 10 * count + 0.5) * MS), "out", f"step {s} loss 1.0"))
    return sorted(events, key=lambda e: e["t"]), out


def measured(events: list[dict[str, Any]], out: list[tuple[int, str, str]]) -> FaultFigures:
    """The fault's figures as a trial computes them (bench/run/trial.py)."""
    observed = translate(events, parse_progress(out, "plain"), finished=True)
    (f,) = fault_figures(
        observed.events, faults=[("kill", "1")], steps=STEPS, warmup_steps=0, phases=STRATEGIES["command"].phases
    )
    f.observed_from_outside(observed.blind, observed.sources)
    return f


def present(f: FaultFigures) -> dict[str, float]:
    return {k: v for k, v in f.phases.items() if not math.isnan(v)}


def test_a_restart_that_lost_nothing_has_no_catchup_and_shows_its_build_and_load() -> None:
    f = measured(*restarted(31))
    assert f.outcome == "recovered", f.error
    assert f.figures["steps_lost"] == 0
    ph = f.phases
    assert ph["phase_catchup_s"] == 0
    assert ph["phase_build_s"] == pytest.approx((BUILD_MS + 1 - PG_MS - 1) / 1e3)
    assert ph["phase_restore_s"] == pytest.approx((LOAD_START_MS + 21 - BUILD_MS - 1) / 1e3)
    assert ph["phase_first_step_s"] == pytest.approx((FIRST_MS + 10.1 - LOAD_START_MS - 21) / 1e3)
    assert f.figures["restore_s"] == pytest.approx(0.020) and f.figures["restore_bytes"] == 1000
    assert sum(present(f).values()) == pytest.approx(f.figures["downtime_s"])
    assert "phase_build_s" not in f.blind and "phase_restore_s" not in f.blind
    assert "model wrapping and checkpoint loads" in f.sources


def test_catchup_holds_as_many_steps_as_were_lost() -> None:
    f = measured(*restarted(26))
    assert f.outcome == "recovered", f.error
    assert f.figures["steps_lost"] == 5
    assert f.phases["phase_catchup_s"] == pytest.approx(5 * 0.010)
    assert sum(present(f).values()) == pytest.approx(f.figures["downtime_s"])


def test_a_load_before_the_model_is_wrapped_leaves_no_phase_negative() -> None:
    f = measured(*restarted(31, load_first=True))
    ph = present(f)
    assert all(v >= 0 for v in ph.values()), ph
    assert ph["phase_restore_s"] == pytest.approx((BUILD_MS + 21 - PG_MS - 1) / 1e3)
    assert ph["phase_build_s"] == pytest.approx((LOAD_END_MS + 11 - BUILD_MS - 21) / 1e3)
    assert sum(ph.values()) == pytest.approx(f.figures["downtime_s"])


def test_a_build_and_load_the_probe_did_not_see_are_said_and_their_time_is_the_first_steps() -> None:
    f = measured(*restarted(31, build=False, load=False))
    assert f.outcome == "recovered", f.error
    assert "phase_build_s: the restarted job wrapped no model" in f.blind
    assert "phase_restore_s: the restarted job loaded nothing" in f.blind
    ph = present(f)
    assert "phase_build_s" not in ph and "phase_restore_s" not in ph
    assert ph["phase_first_step_s"] == pytest.approx((FIRST_MS + 10.1 - PG_MS - 1) / 1e3)
    assert sum(ph.values()) == pytest.approx(f.figures["downtime_s"])


def test_a_resume_step_nothing_shows_leaves_catchup_empty_and_says_why() -> None:
    events, out = restarted(26, printed=False)
    f = measured(events, out)
    assert math.isnan(f.figures["steps_lost"]) and math.isnan(f.phases["phase_catchup_s"])
    assert "phase_catchup_s: the step the restarted job resumed at is unknown" in f.blind
