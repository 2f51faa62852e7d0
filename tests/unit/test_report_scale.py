"""Reports that scale (issue 22): the fast paths give what the plain ones gave.

A report of thousands of trials is fast because of four changes, each checked here
against what it replaced: the median's interval finds its order statistics from one
integer sum (checked against the binomial sum of fractions it replaced), loss curves
are made for every trial at once (checked against one trial at a time), a run's
per-point selections are made once (and stay correct when a caller changes what it was
given), and figures are drawn by forked workers (the same bytes as drawn in-process).
tools/bigrun.py, which makes the large runs the speed is measured on, is checked to
copy a run faithfully. The timings themselves are ``make bench`` (tests/bench).
"""

from __future__ import annotations

import importlib.util
import json
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.report import make_report
from bench.report.drawing import Drawing, DrawingError
from bench.report.timeline import _curve, _curves
from bench.results.reader import load
from bench.results.stats import _order_statistics, median_ci
from tests.unit.runfactory import trial, write_run

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bigrun", ROOT / "tools" / "bigrun.py")
assert _spec is not None and _spec.loader is not None
bigrun = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bigrun)

TTD = [0.05, 0.08, 0.12, 0.2, 0.3, 0.5, 0.9]
TTR = [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]


def _run(tmp_path: Path) -> Path:
    return write_run(
        tmp_path,
        "kill",
        {
            "strategy=failstop": [trial(t) for t in TTD],
            "strategy=reinit": [trial(t, r) for t, r in zip(TTD, TTR, strict=True)],
        },
        steps=True,
        reference=True,
    )


def _by_definition(n: int, q: Fraction, tail: Fraction) -> tuple[int, int, float] | None:
    """The order statistics of the median's interval as the binomial CDF defines them,
    each P(B <= k) summed from fractions (the computation the fast one replaced)."""

    def cdf(k: int) -> Fraction:
        return sum((math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k + 1)), Fraction(0))

    c = [cdf(k) for k in range(n + 1)]
    lows = [i for i in range(1, n + 1) if c[i - 1] <= tail]
    highs = [j for j in range(1, n + 1) if 1 - c[j - 1] <= tail]
    if not lows or not highs or min(highs) <= max(lows) - 1:
        return None
    lo, hi = max(lows), min(highs)
    return lo, hi, float(c[hi - 1] - c[lo - 1])


@pytest.mark.parametrize("q", [0.5, 0.1, 0.9])
@pytest.mark.parametrize("level", [0.95, 0.99, 0.5])
def test_order_statistics_are_the_binomial_definitions(q: float, level: float) -> None:
    p = Fraction(q).limit_denominator(10**6)
    tail = Fraction(1 - level).limit_denominator(10**9) / 2
    for n in range(1, 50):
        assert _order_statistics(n, p, tail) == _by_definition(n, p, tail), n


def test_interval_of_ten_thousand_trials_is_not_quadratic() -> None:
    """The sum of fractions took minutes at n = 1,250 and hours at 10,000; one integer
    sum is ~50 ms on a slow core. 20 s leaves room for any shared machine."""
    start = time.process_time()
    ci = median_ci(list(range(10_000)))
    assert time.process_time() - start < 20
    assert ci.exists and ci.low < 4999.5 < ci.high and ci.coverage >= 0.95


def test_curves_of_every_trial_are_each_trials_own(tmp_path: Path) -> None:
    """Replayed steps, a step only part of the world finished, and ties in time: one
    pass over all trials gives each trial the curve it gets alone."""
    rng = np.random.default_rng(3)
    rows = []
    for t in range(6):
        for gen, (ranks, steps) in enumerate([((0, 1, 2, 3), range(1, 12)), ((0, 1, 3), range(9, 20))]):
            for step in steps:
                for rank in ranks[: (2 if (t == 2 and step == 11 and gen == 0) else None)]:
                    t_s = round(0.1 * step + 0.5 * gen + (0 if t == 4 else rng.uniform(0, 1e-3)), 3)
                    loss = float(rng.uniform(0.5, 2.0))
                    rows.append((t, gen, step, rank, t_s, len(ranks), loss))
    df = pd.DataFrame(rows, columns=["trial", "gen", "step", "rank", "t_s", "world_size", "loss"])
    df = df.sample(frac=1.0, random_state=1)  # the file's order is not sorted
    every = _curves(df)
    for t, group in df.groupby("trial"):
        alone = _curve(group).reset_index(drop=True)
        mine = every[every["trial"] == t][["step", "loss"]].reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, alone)
    run = load(_run(tmp_path))
    for h in run.steps_by_point():
        fault = run.point_steps(h)
        fault = fault[~fault["reference"] & fault["loss"].notna()]
        every = _curves(fault)
        for t, group in fault.groupby("trial"):
            mine = every[every["trial"] == t][["step", "loss"]].reset_index(drop=True)
            pd.testing.assert_frame_equal(mine, _curve(group).reset_index(drop=True))


def test_point_selections_are_made_once_and_stay_whole(tmp_path: Path) -> None:
    run = load(_run(tmp_path))
    h = run.points()[1]["point_hash"]
    first = run.measured(h)
    first["ttd_s"] = -1.0  # a caller changing its copy changes nothing kept
    assert run.values(h, "ttd_s") == TTD
    values = run.values(h, "ttd_s")
    values.append(99.0)
    assert 99.0 not in run.values(h, "ttd_s")
    full = pd.read_csv(run.path / "steps.csv")
    mine = run.point_steps(h)
    theirs = full[full["point_hash"] == h]
    assert len(mine) == len(theirs) and list(mine["t_s"]) == list(theirs["t_s"])
    assert run.point_steps("no such point").empty
    run.trials = run.trials[run.trials["trial"] < 3]  # a new table: the selections follow
    assert len(run.values(h, "ttd_s")) == 3


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
def test_figures_drawn_by_workers_are_the_figures_drawn_in_process(tmp_path: Path) -> None:
    run = _run(tmp_path)
    serial = make_report([run], tmp_path / "serial", workers=1)
    parallel = make_report([run], tmp_path / "parallel", workers=2)
    assert len(serial.images) == len(parallel.images) == 6
    assert _files(tmp_path / "serial") == _files(tmp_path / "parallel")
    assert not multiprocessing.active_children()


def _boom() -> None:
    raise ValueError("no such figure")


def _stuck() -> None:
    time.sleep(60)


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
def test_a_figure_that_fails_or_sticks_ends_the_workers() -> None:
    with Drawing(workers=2) as draw:
        ok = draw.submit(pow, 2, 10)
        bad = draw.submit(_boom)
        draw.start()
        assert ok.result() == 1024
        with pytest.raises(ValueError, match="no such figure"):
            bad.result()
    assert not multiprocessing.active_children()
    start = time.monotonic()
    with Drawing(workers=2, deadline_s=1.0) as draw:
        stuck = draw.submit(_stuck)
        draw.submit(_stuck)
        draw.start()
        with pytest.raises(DrawingError, match="not drawn within 1 s"):
            stuck.result()
    assert time.monotonic() - start < 30
    assert not multiprocessing.active_children()


def test_bigrun_replicates_a_run_faithfully(tmp_path: Path) -> None:
    source = _run(tmp_path)
    out = bigrun.replicate(source, tmp_path / "big", trials=40, points=4)
    src, big = load(source), load(out)
    assert len(big.points()) == 4 and len(big.measured()) == 40
    for p in big.points():  # each point's reference trial, once
        assert big.events_dir(p["point_hash"], "reference").is_dir()
        steps = big.point_steps(p["point_hash"])
        assert steps[steps["reference"]]["trial"].unique().tolist() == [0]
    info = json.loads((out / "run.json").read_text())
    assert info["replicated_from"] == str(source) and info["trials"] == 10
    for k, p in enumerate(big.points()):
        s = src.points()[k % 2]
        assert p["label"] == f"{s['label']} replica={k}" and p["values"]["replica"] == k
        theirs = src.values(s["point_hash"], "ttd_s")
        assert big.values(p["point_hash"], "ttd_s") == [theirs[t % len(theirs)] for t in range(10)]
        for t in (0, 9):
            mine = big.point_steps(p["point_hash"])
            mine = mine[(mine["trial"] == t) & ~mine["reference"]].drop(columns=["point_hash", "trial"])
            theirs_steps = src.point_steps(s["point_hash"])
            theirs_steps = theirs_steps[(theirs_steps["trial"] == t % 7) & ~theirs_steps["reference"]]
            assert mine.reset_index(drop=True).equals(
                theirs_steps.drop(columns=["point_hash", "trial"]).reset_index(drop=True)
            )
            a, b = big.events_dir(p["point_hash"], t), src.events_dir(s["point_hash"], t % 7)
            assert sorted(f.name for f in a.iterdir()) == sorted(f.name for f in b.iterdir())
            assert (a / "harness.jsonl").read_bytes() == (b / "harness.jsonl").read_bytes()
    with pytest.raises(SystemExit, match="exists"):
        bigrun.replicate(source, out, trials=40, points=4)


_ORPHAN = """
import os, sys, time
from bench.report.drawing import Drawing
def stuck(): time.sleep(120)
d = Drawing(workers=2); d.submit(stuck); d.submit(stuck); d.start()
print(" ".join(str(p.pid) for p in d._pool._pool), flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
def test_workers_die_with_a_killed_report() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _ORPHAN], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        workers = [int(p) for p in proc.stdout.readline().split()]
        assert len(workers) == 2
    finally:
        proc.kill()
        proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in workers if _running(pid)]
    for pid in left:  # a failing check leaves no orphan behind
        os.kill(pid, signal.SIGKILL)
    assert not left


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
