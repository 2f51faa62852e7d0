"""``ftbench project``: the arithmetic against hand-computed values, the phase-growth model
selection, bands, empty figures for stacks that did not recover, and bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.project import assumptions, build
from bench.project.fit import choose
from bench.results.reader import load
from bench.scenario.config import ConfigError
from tests.unit.runfactory import trial, write_run

# A cluster that makes the arithmetic round: 100 hosts x 8 GPUs, each host failing
# 0.864 times a day = 1e-5 per second, so lambda = 1e-3 per second (M = 1000 s); the
# phases a GPU cluster adds are left out here (the arithmetic of what a run measured)
# and computed by hand in test_project_gpu.py.
ROUND = ("gpus=[800]", "gpus_per_host=8", "failures_per_host_day=0.864", "gpu_phases=false")


def _full(ttd: float, ttr: float, **extra: object) -> dict[str, object]:
    """A recovered trial back at full strength the moment it recovered (no degraded time)."""
    return trial(ttd, ttr, ttfs_s=ttd + ttr, **extra)


def _one(run: Path, *sets: str) -> float:
    res = build(load(run), assumptions.cluster(None, sets), replicates=50)
    return res.projections[0].cells[0].effective


def test_lost_time_and_effective_fraction_by_hand(tmp_path: Path) -> None:
    # L = ttd + ttr = 1 + 9 = 10 s per failure; E = 1 / (1 + 1e-3 x 10).
    run = write_run(tmp_path, "s", {"strategy=reinit": [_full(1.0, 9.0)] * 3})
    assert _one(run, *ROUND) == pytest.approx(1 / 1.01)


def test_checkpointing_stack_replays_half_the_interval_and_pays_the_writes(tmp_path: Path) -> None:
    # Phases of runfactory's trial: detect 1, isolate 4.5, reconfigure 1.8, catch-up 2.7
    # (replaced by tau / 2 = 500 s for a stack that wrote checkpoints).
    run = write_run(tmp_path, "s", {"strategy=restart": [_full(1.0, 9.0, checkpoint_s=0.5)] * 3})
    e = _one(run, *ROUND, "checkpoint_write_s=10", "checkpoint_interval_s=1000")
    assert e == pytest.approx((1000 / 1010) / (1 + 1e-3 * (1 + 4.5 + 1.8 + 500)))


def test_optimal_interval_young_and_daly() -> None:
    c = assumptions.cluster(None, (*ROUND, "checkpoint_write_s=10"))
    assert c.interval(800)[0] == pytest.approx(math.sqrt(2 * 10 * 1000) - 10)
    young = assumptions.cluster(None, (*ROUND, "checkpoint_write_s=10", "interval_rule='young'"))
    assert young.interval(800)[0] == pytest.approx(math.sqrt(2 * 10 * 1000))


def test_default_failure_rate_is_llama3s_count() -> None:
    # On Llama 3's own cluster the default gives back its count: 419 in 54 days.
    c = assumptions.TargetCluster()
    assert c.rate(16_384) * 54 * 86_400 == pytest.approx(419)


def test_shrunken_world_pays_degraded_throughput_until_full_strength(tmp_path: Path) -> None:
    # Never back to full strength in the run: full_strength_s = 100 s assumed; one host
    # of 8 GPUs out of 800 is 1 % of the throughput: 1 s lost per failure on top of 10.
    run = write_run(tmp_path, "s", {"strategy=reinit": [trial(1.0, 9.0)] * 3})
    e = _one(run, *ROUND, "full_strength_s=100")
    assert e == pytest.approx(1 / (1 + 1e-3 * 11))


def test_shares_and_training_add_up_to_one(tmp_path: Path) -> None:
    run = write_run(tmp_path, "s", {"strategy=restart": [_full(0.5, 3.0, checkpoint_s=0.2)] * 3})
    cell = build(load(run), assumptions.TargetCluster(), replicates=20).projections[0].cells[1]
    assert cell.effective + sum(cell.shares.values()) == pytest.approx(1.0)


def test_failed_strategy_gets_no_figure_and_says_why(tmp_path: Path) -> None:
    pts = {"strategy=failstop": [trial(0.1, ttfs_s=None)] * 3, "strategy=reinit": [_full(1.0, 2.0)] * 3}
    run = write_run(tmp_path, "s", pts)
    res = CliRunner().invoke(cli, ["project", str(run), "--out", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    row = next(line for line in res.output.splitlines() if line.split()[:2] == ["kill", "failstop"])
    assert "—" in row and "no trial recovered (failed 3)" in row
    assert "0.0 %" not in row
    assert (tmp_path / "p" / "project.png").stat().st_size > 0
    assert "1,024 GPUs" in (tmp_path / "p" / "project.md").read_text()


def test_without_scaling_run_it_says_phases_are_constant(tmp_path: Path) -> None:
    run = write_run(tmp_path, "s", {"strategy=reinit": [_full(1.0, 2.0)] * 3})
    res = CliRunner().invoke(cli, ["project", str(run), "--out", str(tmp_path / "p")])
    assert "assumed constant in world size" in res.output
    assert "Llama 3" in res.output and "checkpoint_write_s" in res.output


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        (lambda w: 0.5 + 0.1 * w, "linear"),
        (lambda w: 0.5 + 0.4 * np.log2(w), "log"),
        (lambda w: 0.5 + 0 * w, "constant"),
    ],
)
def test_fit_recognises_the_shape(shape: object, expected: str) -> None:
    rng = np.random.default_rng(1)
    w = np.repeat([2.0, 4.0, 8.0, 16.0], 3)
    y = shape(w) + rng.normal(0, 0.01, len(w))  # type: ignore[operator]
    assert choose(w.tolist(), y.tolist()).fit.model == expected


def test_a_falling_phase_is_not_extrapolated_down_to_nothing() -> None:
    w = [2.0, 2.0, 4.0, 4.0, 8.0, 8.0]
    y = [5.0 - 0.5 * x for x in w]
    choice = choose(w, y)
    assert choice.fit.model == "constant" and "falls" in choice.reason


def test_fit_with_one_world_size_is_constant() -> None:
    assert choose([4, 4, 4], [1.0, 2.0, 3.0]).fit.model == "constant"


def test_scaling_run_grows_a_linear_phase_and_widens_the_band(tmp_path: Path) -> None:
    # isolate grows by 0.1 s per rank in the scaling run; the main run has ttr = 2 s at
    # 4 ranks. At 800 GPUs the fitted shift is 0.1 x (800 - 4) = 79.6 s.
    pts = {}
    rng = np.random.default_rng(0)
    for w in (2, 4, 8):
        rows = []
        for _ in range(3):
            iso = 0.1 * w + rng.normal(0, 0.005)
            rows.append(_full(1.0, 2.0, world_size=w, phase_isolate_s=iso))
        pts[f"world_size={w}"] = rows
    scaling = write_run(tmp_path, "sc", pts, salt="sc")
    main = write_run(tmp_path, "m", {"strategy=reinit": [_full(1.0, 2.0)] * 3})
    res = build(load(main), assumptions.cluster(None, ROUND), load(scaling), replicates=200)
    p = res.projections[0]
    assert p.models["isolate"].startswith("linear")
    cell = p.cells[0]
    assert cell.lost_s == pytest.approx(3.0 + 0.1 * (800 - 4), abs=1.0)
    assert cell.low < cell.effective < cell.high
    out = CliRunner().invoke(cli, ["project", str(main), "--scaling", str(scaling), "--out", str(tmp_path / "o")])
    assert out.exit_code == 0, out.output
    assert "isolate: linear" in out.output and "outnumber" in out.output
    # A fault kind the scaling run did not sweep borrows the strategy's growth, never detection's.
    stall = write_run(tmp_path, "st", {"strategy=reinit": [_full(1.0, 2.0, fault="stall")] * 3})
    res = build(load(stall), assumptions.cluster(None, ROUND), load(scaling), replicates=50)
    assert res.projections[0].models["isolate"].startswith("linear")
    assert not res.projections[0].models["detect"].startswith("linear")
    assert any("taken from the scaling run's kill fault" in n for n in res.notes)
    # Per core: 0.1 w s at w ranks on the run's 2 cores is 0.2 s a rank whatever w (>= 2).
    per_core = assumptions.cluster(None, (*ROUND, "oversubscribed='per-core'"))
    p = build(load(main), per_core, load(scaling), replicates=50).projections[0]
    assert p.models["isolate"].startswith("constant")


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["--set", "gpus=[0]"], "gpus"),
        (["--set", "gpus_per_host=many"], "gpus_per_host"),
        (["--set", "interval_rule='best'"], "interval_rule"),
        (["--set", "checkpoint_interval_s=-5"], "checkpoint_interval_s"),
        (["--set", "failures_per_gpu_day=nan"], "failures_per_gpu_day"),
        (["--set", "warp_factor=9"], "warp_factor"),
        (["--set", "novalue"], "novalue"),
    ],
)
def test_bad_input_is_one_line_naming_the_key(tmp_path: Path, args: list[str], key: str) -> None:
    run = write_run(tmp_path, "s", {"strategy=reinit": [_full(1.0, 2.0)] * 3})
    res = CliRunner().invoke(cli, ["project", str(run), *args])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in res.output


def test_cluster_file_is_read_and_checked(tmp_path: Path) -> None:
    run = write_run(tmp_path, "s", {"strategy=reinit": [_full(1.0, 9.0)] * 3})
    good = tmp_path / "c.toml"
    good.write_text("gpus = [800]\ngpus_per_host = 8\nfailures_per_host_day = 0.864\n")
    res = CliRunner().invoke(cli, ["project", str(run), "--cluster", str(good), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0 and "99.01 %" in res.output and "set by the user" in res.output
    bad = tmp_path / "bad.toml"
    bad.write_text("checkpoint_write_s = 'slow'\n")
    res = CliRunner().invoke(cli, ["project", str(run), "--cluster", str(bad)])
    assert res.exit_code == 2 and "bad.toml: checkpoint_write_s" in res.output
    bad.write_text("gpus = [\n")
    res = CliRunner().invoke(cli, ["project", str(run), "--cluster", str(bad)])
    assert res.exit_code == 2 and "valid TOML" in res.output


def test_report_includes_the_projection_written_into_the_run(tmp_path: Path) -> None:
    run = write_run(tmp_path, "s", {"strategy=reinit": [_full(1.0, 2.0)] * 3})
    assert CliRunner().invoke(cli, ["project", str(run)]).exit_code == 0
    res = CliRunner().invoke(cli, ["report", str(run)])
    assert res.exit_code == 0, res.output
    md = (run / "report.md").read_text()
    assert "## Projection to cluster scale" in md and "](project/project.png)" in md


def test_missing_scaling_run_or_cluster_file_is_exit_2(tmp_path: Path) -> None:
    run = write_run(tmp_path, "s", {"strategy=reinit": [_full(1.0, 2.0)] * 3})
    for args in (["--scaling", str(tmp_path / "nope")], ["--cluster", str(tmp_path / "nope.toml")]):
        res = CliRunner().invoke(cli, ["project", str(run), *args])
        assert res.exit_code == 2 and "nope" in res.output and len(res.output.strip().splitlines()) == 1


def test_a_set_value_cannot_smuggle_in_a_second_key() -> None:
    """``checkpoint_write_s=10\\nx = 2`` is not the number 10 (TOML would read its first
    line so): it is a string, and the key expects a number."""
    with pytest.raises(ConfigError, match="checkpoint_write_s"):
        assumptions.cluster(None, ("checkpoint_write_s=10\nx = 2",))
    assert assumptions.cluster(None, ("checkpoint_write_s=10",)).checkpoint_write_s == 10


def test_a_gpu_restarts_cuda_context_and_upload_are_phases_like_the_others(tmp_path: Path) -> None:
    """A run from a GPU (tools/gpu-check.sh --one-gpu) is read as any run: the CUDA context
    and the upload count in the time lost per failure, and the report's phase table
    names them."""
    from bench.report import make_report

    # Phases 1 + 3.8 + 0.5 + 0.2 + 1.8 + 2.7 = 10 s, the downtime: E = 1 / (1 + 1e-3 x 10).
    gpu = _full(1.0, 9.0, phase_isolate_s=3.8, phase_cuda_s=0.5, phase_upload_s=0.2)
    run = write_run(tmp_path, "gpu-recovery", {"strategy=restart": [gpu] * 3})
    assert _one(run, *ROUND) == pytest.approx(1 / 1.01)
    md = make_report([run]).markdown.read_text()
    header = next(line for line in md.splitlines() if line.startswith("| point | detect"))
    assert "| cuda |" in header and "| upload |" in header
