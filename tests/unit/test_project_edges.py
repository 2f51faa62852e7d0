"""A projection cannot say the impossible: every share of wall time it prints lies in
[0, 100 %], noise is never counted as a gain, and drawing it warns of nothing, whatever
the inputs at their edges (made up here, each the way a real run could give it).

The case that found it: reinit's fault-free step time measured 0.881 [0.745, 1.060] of
plain DDP's in a 2-trial resilience-tax run, which printed reinit at 113.53 % of wall
time training and a matplotlib warning ("Data has no positive values").
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from bench.project import assumptions, build
from bench.project.inputs import Band, Inputs
from bench.project.render import parts_table, plot, text
from bench.results.reader import load
from tests.unit.runfactory import trial, write_run

PERCENT = re.compile(r"(-?\d+(?:\.\d+)?) %")
BAND = re.compile(r"\[(-?\d+(?:\.\d+)?)–(-?\d+(?:\.\d+)?)\]")


def _full(ttd: float, ttr: float, **extra: object) -> dict[str, object]:
    return trial(ttd, ttr, ttfs_s=ttd + ttr, **extra)


def _shares_in_range(output: str) -> None:
    """Every per-cent figure and every band of the printed projection in [0, 100]."""
    effective = output.split("Where the time goes")[0]
    values = [float(v) for v in PERCENT.findall(output)]
    values += [float(v) for pair in BAND.findall(effective) for v in pair]
    assert values, "the projection printed no figure"
    assert all(0.0 <= v <= 100.0 for v in values), sorted(values)[-3:] + sorted(values)[:3]


def _check(tmp_path: Path, run: Path, sets: tuple[str, ...] = (), tax: Band | None = None) -> str:
    inp = Inputs(tax={"reinit": tax} if tax is not None else {})
    res = build(load(run), assumptions.cluster(None, sets), inputs=inp, replicates=200)
    for p in res.projections:
        for c in p.cells:
            assert 0.0 <= c.low <= c.effective <= c.high <= 1.0
            assert all(0.0 <= v <= 1.0 for v in c.shares.values()), c.shares
            assert c.effective + sum(c.shares.values()) == pytest.approx(1.0)
    out = text(res)
    _shares_in_range(out)
    assert not parts_table(res).empty
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a matplotlib warning fails the test
        plot(res, tmp_path / "p.png", replicates=50)
    return out


def test_a_tax_interval_holding_1_is_no_gain(tmp_path: Path) -> None:
    # The case: 0.881 [0.745, 1.060] printed 113.53 %.
    run = write_run(tmp_path, "kill-one-rank", {"strategy=reinit": [_full(0.015, 0.026)] * 5})
    out = _check(tmp_path, run, tax=Band(0.881, 0.745, 1.060))
    assert "113" not in out
    assert "the interval holds 1, so no gain is counted" in out
    assert "(used: 1, below 1 is no gain)" in out


def test_a_tax_measured_below_1_throughout_is_taken_as_1(tmp_path: Path) -> None:
    run = write_run(tmp_path, "s", {"strategy=reinit": [_full(0.02, 0.03)] * 3})
    out = _check(tmp_path, run, tax=Band(0.5, 0.4, 0.6))
    assert "below 1, which would train more than all the wall time" in out


def test_a_tax_interval_so_wide_its_draws_go_negative(tmp_path: Path) -> None:
    # A normal with a 95 % interval of [-2, 4] draws negative ratios: 1/t would flip E's sign.
    run = write_run(tmp_path, "s", {"strategy=reinit": [_full(0.02, 0.03)] * 3})
    _check(tmp_path, run, tax=Band(1.0, -2.0, 4.0))


def test_a_stack_that_loses_nothing_prints_100_and_draws_without_a_warning(tmp_path: Path) -> None:
    # Every phase 0 (detected and recovered within the clock's resolution): E = 100 %,
    # nothing to put on the log axis of time lost.
    zero = _full(0.0, 0.0, phase_isolate_s=0.0, phase_reconfigure_s=0.0, phase_catchup_s=0.0)
    run = write_run(tmp_path, "s", {"strategy=reinit": [zero] * 3})
    out = _check(tmp_path, run)
    assert "100.00 %" in out


def test_negative_phases_from_skewed_clocks_count_as_no_time(tmp_path: Path) -> None:
    skewed = _full(-0.5, 1.0, phase_isolate_s=-3.0, phase_reconfigure_s=-1.0, phase_catchup_s=-2.0)
    run = write_run(tmp_path, "s", {"strategy=reinit": [skewed] * 3})
    _check(tmp_path, run, tax=Band(0.9, 0.8, 1.0))


@pytest.mark.parametrize(
    "sets",
    [
        ("failures_per_gpu_day=1e6",),  # failures far faster than recoveries: E near 0, not below
        ("failures_per_gpu_day=1e-9",),  # almost none: E near 100 %, not above
        ("checkpoint_write_s=0",),  # free checkpoints: c = 1
        ("checkpoint_write_s=1e9",),  # writes longer than the MTBF: Daly's tau = M
        ("gpus=[1]", "gpus_per_host=1024"),  # a cluster smaller than the run measured
        ("full_strength_s=0",),
        ("checkpoint_interval_s=1e-6",),
        ("storage_read_gb_s=1e-9",),  # a checkpoint load of years: E near 0, not below
        ("comm_init_at=[[1, 1e6]]", "host_start_at=[[1, 1e6]]"),  # phases longer than the MTBF
        ("comm_init_at=[[10, 100], [20, 1]]",),  # published points that fall: held flat, not negative
        ("comm_init_growth='log'", "host_start_growth='constant'", "model_params=1e16"),
        ("gpu_phases=false",),
    ],
)
def test_cluster_assumptions_at_their_edges(tmp_path: Path, sets: tuple[str, ...]) -> None:
    pts = {
        "strategy=reinit": [trial(0.02, 0.05, ttfs_s=None, checkpoint_s=0.0)] * 3,  # never back: degraded
        "strategy=restart": [_full(0.1, 8.0, checkpoint_s=0.5)] * 3,
    }
    run = write_run(tmp_path, "s", pts)
    _check(tmp_path, run, sets, tax=Band(0.95, 0.7, 1.2))


def test_draws_of_a_normal_tax_never_fall_below_1() -> None:
    from bench.project.model import taxes

    value, draws, why = taxes(Band(0.881, 0.745, 1.060), np.random.default_rng(0), 5000)
    assert value == 1.0 and draws.min() >= 1.0 and draws.max() > 1.0 and why
    value, draws, why = taxes(Band(1.2, 1.1, 1.3), np.random.default_rng(0), 100)
    assert value == 1.2 and not why and draws.min() >= 1.0


@pytest.mark.parametrize("sets", [(), ("failures_per_gpu_day=10",), ("gpus=[1, 8, 9]", "gpus_per_host=8")])
def test_every_kind_of_stack_with_the_gpu_phases_stays_a_share(tmp_path: Path, sets: tuple[str, ...]) -> None:
    # A whole-job restart, an in-place stack never back to full strength, torchft back
    # later and an in-place stack that reloads a checkpoint: every row of the GPU
    # phases' table, at ordinary and extreme rates and at clusters of one host or less.
    pts = {
        "strategy=restart": [_full(0.1, 8.0, checkpoint_s=0.5, phase_pg_s=0.3, phase_restore_s=0.05)] * 3,
        "strategy=reinit": [trial(0.02, 0.05, ttfs_s=None)] * 3,
        "strategy=torchft": [trial(0.03, 5.0, ttfs_s=30.0)] * 3,
        "strategy=nvrx-inprocess": [trial(0.1, 3.0, ttfs_s=None, checkpoint_s=0.2, phase_pg_s=0.5)] * 3,
    }
    run = write_run(tmp_path, "s", pts)
    out = _check(tmp_path, run, sets)
    assert "GPU phases" in out
