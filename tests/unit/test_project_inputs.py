"""``ftbench project`` with measured inputs: each stack's fault-free tax divides its
effective training time, and the state fits size its checkpoint writes and restores at
the cluster's state per GPU; the output says which inputs were measured and which assumed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.project import assumptions, build, inputs
from bench.results.reader import load
from tests.unit.runfactory import trial, write_run

ROUND = ("gpus=[800]", "gpus_per_host=8", "failures_per_host_day=0.864", "gpu_phases=false")
"""lambda = 1e-3 per second at 800 GPUs, the GPU phases left out (see test_project.py)."""


def _full(ttd: float, ttr: float, **extra: object) -> dict[str, object]:
    return trial(ttd, ttr, ttfs_s=ttd + ttr, **extra)


def _fault_free(step_s: float) -> dict[str, object]:
    return trial(None, outcome="completed", fault="none", ff_step_s=step_s, goodput=0.9)


def _tax_run(root: Path, ratio: float) -> Path:
    """A resilience-tax run beside the failure run: reinit ``ratio`` x failstop's step time."""
    labels = ("strategy=failstop", "strategy=reinit")
    base = [_fault_free(s) for s in (0.050, 0.0501, 0.0499, 0.050, 0.0502, 0.0498)]
    slow = [_fault_free(s * ratio) for s in (0.050, 0.0501, 0.0499, 0.050, 0.0502, 0.0498)]
    return write_run(
        root,
        "resilience-tax",
        dict(zip(labels, (base, slow), strict=True)),
        values={label: {"recovery.strategy": label.split("=")[1]} for label in labels},
    )


def test_the_tax_divides_the_effective_time_and_has_a_share(tmp_path: Path) -> None:
    run = write_run(tmp_path, "s", {"strategy=reinit": [_full(1.0, 9.0)] * 3})
    measured = inputs.gather(load(_tax_run(tmp_path, 1.25)), None)
    assert measured.tax["reinit"].value == pytest.approx(1.25) and measured.tax["failstop"].value == 1.0
    res = build(load(run), assumptions.cluster(None, ROUND), inputs=measured, replicates=50)
    cell = res.projections[0].cells[0]
    assert cell.effective == pytest.approx(1 / 1.01 / 1.25)  # L = 10 s at lambda = 1e-3
    assert cell.shares["tax"] == pytest.approx(1 / 1.01 * (1 - 1 / 1.25))
    assert cell.effective + sum(cell.shares.values()) == pytest.approx(1.0)


def _state_run(root: Path) -> Path:
    """restart at 4 state sizes: a save blocks 0.1 s + 2 s/GB, the restore phase takes
    0.5 s + 4 s/GB (exact lines, three trials each)."""
    pts = {}
    for mb in (1, 10, 100, 1000):
        b = mb * 1e6
        rows = [
            _full(
                0.1,
                3.0,
                checkpoint_blocked_s=0.1 + 2.0 * b / 1e9,
                checkpoint_bytes=b,
                phase_restore_s=0.5 + 4.0 * b / 1e9,
                restore_s=0.4 + 3.5 * b / 1e9,
                restore_bytes=b,
            )
            for _ in range(3)
        ]
        pts[f"state_mb={mb}"] = rows
    return write_run(root, "state-scaling", pts, strategy="restart")


def test_state_fits_size_the_writes_and_the_restore_at_the_clusters_state(tmp_path: Path) -> None:
    measured = inputs.gather(None, load(_state_run(tmp_path)))
    save, restore = measured.save["restart"], measured.restore["restart"]
    assert save.at(10e9) == pytest.approx(0.1 + 20.0)
    assert restore.phase == "phase_restore" and restore.at(10e9) == pytest.approx(0.5 + 40.0)
    assert "extrapolated past the 1 GB measured" in save.describe(10e9)
    # A run whose restart trials checkpointed and restored: phases detect 0.1, restore
    # 0.5 + 4 x 0.001 (its own 1 MB), catch-up replaced by tau / 2.
    restore_1mb = 0.5 + 4.0 * 1e-3
    run = write_run(
        tmp_path,
        "s",
        {"strategy=restart": [_full(0.1, 3.0, checkpoint_s=0.2, phase_restore_s=restore_1mb)] * 3},
    )
    sets = (*ROUND, "state_bytes_per_gpu=10e9", "checkpoint_interval_s=1000")
    res = build(load(run), assumptions.cluster(None, sets), inputs=measured, replicates=20)
    delta = 0.1 + 2.0 * 10
    lost = res.projections[0].cells[0]
    parts = trial(0.1, 3.0)
    other = sum(v for k, v in parts.items() if k.startswith("phase_") and k not in ("phase_catchup_s",) and v)
    expected_loss = other + (0.5 + 40.0) + 1000 / 2  # the restore at 10 GB, half an interval replayed
    assert lost.effective == pytest.approx((1000 / (1000 + delta)) / (1 + 1e-3 * expected_loss), rel=1e-6)


def test_the_cli_finds_sibling_runs_and_says_what_was_measured(tmp_path: Path) -> None:
    _tax_run(tmp_path, 1.1)
    _state_run(tmp_path)
    run = write_run(tmp_path, "s", {"strategy=restart": [_full(0.1, 3.0, checkpoint_s=0.2)] * 3})
    out = CliRunner().invoke(cli, ["project", str(run), "--set", "model_params=70e9", "--out", str(tmp_path / "p")])
    assert out.exit_code == 0, out.output
    assert "Measured and assumed inputs" in out.output
    assert "assumed: 1 (none measured)" in out.output  # no restart point in the tax run
    assert "measured: " in out.output and "s/GB" in out.output
    assert "state per GPU: 0.957 GB at 1,024 GPUs" in out.output  # 70e9 x 14 B over the whole job
    assert "checkpoint_write_s is not used: every checkpointing stack's write is measured" in out.output
    none = CliRunner().invoke(
        cli, ["project", str(run), "--tax", "none", "--state", "none", "--out", str(tmp_path / "q")]
    )
    assert none.exit_code == 0 and "no resilience-tax run" in none.output and "no state-scaling run" in none.output
    bad = CliRunner().invoke(cli, ["project", str(run), "--tax", str(tmp_path / "nowhere")])
    assert bad.exit_code == 2 and "--tax" in bad.output
