"""The phases a GPU cluster adds to a recovery (``bench.project.gpu``): each stack pays
what the declared table says, each phase is the line through its published points,
counted beyond the run's own phase doing the same work, and ``gpu_phases = false``
leaves them out; bad values of their keys are one line naming the key.

The expected values are computed here from the published points with numpy's own line
fit, not with the module's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.project import assumptions, build, gpu
from bench.results.reader import load
from tests.unit.runfactory import trial, write_run

# 1,000 hosts of 8 GPUs, each failing 0.0864 times a day: lambda = 1e-3 per second.
BIG = ("gpus=[8000]", "gpus_per_host=8", "failures_per_host_day=0.0864")


def line(points: list[tuple[float, float]], x: float) -> float:
    slope, intercept = np.polyfit([p[0] for p in points], [p[1] for p in points], 1)
    return max(0.0, float(intercept + slope * x))


def comm(x: float) -> float:
    return line([(2048, 5.0), (10000, 30.0)], x)  # MegaScale's two points


def host(x: float) -> float:
    return line([(1, 5.0), (15000, 60.0)], x)  # the pod start-up SLO and JobSet KEP-262


def _e(run: Path, *sets: str) -> float:
    res = build(load(run), assumptions.cluster(None, sets), replicates=20)
    return res.projections[0].cells[0].effective


def test_a_whole_job_restart_pays_all_three_beyond_its_own_phases(tmp_path: Path) -> None:
    # Phases: detect 1, isolate 4.5, reconfigure 1.8, restore 2, pg 0.25; catch-up
    # replaced by tau / 2 = 500 s (it checkpointed).
    t = trial(1.0, 9.0, ttfs_s=10.0, checkpoint_s=0.5, phase_restore_s=2.0, phase_pg_s=0.25)
    run = write_run(tmp_path, "s", {"strategy=restart": [t] * 3})
    sets = (*BIG, "checkpoint_write_s=10", "checkpoint_interval_s=1000", "state_bytes_per_gpu=1e9")
    sets += ("storage_read_gb_s=100",)
    measured = 1 + 4.5 + 1.8 + 2.0 + 0.25 + 500
    load_s = 8000 * 1e9 / 100e9  # every GPU reads its 1 GB at once, 100 GB/s in all
    added = (comm(8000) - 0.25) + (load_s - 2.0) + host(1000)
    assert _e(run, *sets) == pytest.approx((1000 / 1010) / (1 + 1e-3 * (measured + added)), rel=1e-9)
    assert _e(run, *sets, "gpu_phases=false") == pytest.approx((1000 / 1010) / (1 + 1e-3 * measured), rel=1e-9)
    # The parts: each its own share of the wall time, the lot still adding up to 1.
    cell = build(load(run), assumptions.cluster(None, sets), replicates=20).projections[0].cells[0]
    denom = 1 + 1e-3 * (measured + added)
    assert cell.shares["host_start"] == pytest.approx(1e-3 * host(1000) / denom)
    assert cell.gpu["storage_load"].seconds == pytest.approx(load_s) and cell.gpu["storage_load"].counted == 78.0
    assert cell.effective + sum(cell.shares.values()) == pytest.approx(1.0)


def test_a_restore_slower_than_the_storage_leaves_no_load_to_count(tmp_path: Path) -> None:
    t = trial(1.0, 9.0, ttfs_s=10.0, checkpoint_s=0.5, phase_restore_s=50.0)
    run = write_run(tmp_path, "s", {"strategy=restart": [t] * 3})
    res = build(load(run), assumptions.cluster(None, (*BIG, "state_bytes_per_gpu=1e9")), replicates=20)
    cost = res.projections[0].cells[0].gpu["storage_load"]
    assert cost.seconds == pytest.approx(4.0) and cost.counted == 0.0  # 8 TB at 2 TB/s < its 50 s restore


def test_an_in_place_stack_re_forms_its_group_twice_and_waits_for_no_host(tmp_path: Path) -> None:
    # Never back to full strength in the run: it shrank, so it forms the group of the
    # 7,992 survivors, then of all 8,000 when a host joins (full_strength_s later).
    run = write_run(tmp_path, "s", {"strategy=reinit": [trial(1.0, 9.0)] * 3})
    measured = 1 + 4.5 + 1.8 + 2.7 + (8 / 8000) * 100  # its phases and degraded running
    added = comm(7992) + comm(8000) - 1.8  # less its own reconfigure
    assert _e(run, *BIG, "full_strength_s=100") == pytest.approx(1 / (1 + 1e-3 * (measured + added)), rel=1e-9)
    cell = build(load(run), assumptions.cluster(None, BIG), replicates=20).projections[0].cells[0]
    assert set(cell.gpu) == {"comm_init"} and cell.shares.get("host_start", 0.0) == 0.0


def test_torchft_re_forms_the_replica_dimension_only(tmp_path: Path) -> None:
    # Back to full strength 20 s after it recovered: replica groups (one per host) drop to
    # 999 and come back to 1,000; its 8,000 GPUs' own communicators are kept.
    run = write_run(tmp_path, "s", {"strategy=torchft": [trial(1.0, 9.0, ttfs_s=30.0)] * 3})
    measured = 1 + 4.5 + 1.8 + 2.7 + (8 / 8000) * 20
    added = comm(999) + comm(1000) - 1.8
    assert _e(run, *BIG) == pytest.approx(1 / (1 + 1e-3 * (measured + max(0.0, added))), rel=1e-9)


def test_a_stack_no_row_declares_pays_none_and_the_output_says_so(tmp_path: Path) -> None:
    run = write_run(tmp_path, "s", {"strategy=mystack": [trial(1.0, 9.0, ttfs_s=10.0)] * 3})
    res = CliRunner().invoke(cli, ["project", str(run), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "mystack: no GPU phases declared for it" in res.output


def test_the_output_shows_the_phases_their_sources_and_how_to_leave_them_out(tmp_path: Path) -> None:
    run = write_run(tmp_path, "s", {"strategy=restart": [trial(0.1, 8.0, ttfs_s=8.1, checkpoint_s=0.5)] * 3})
    res = CliRunner().invoke(cli, ["project", str(run), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    for text in ("comm_init_at = 2,048 GPUs: 5 s; 10,000 GPUs: 30 s", "MegaScale", "KEP-262", "Tectonic"):
        assert text in res.output
    assert "313 s over 100,000 GPUs" in res.output and "extrapolated past 10,000" in res.output
    assert "torchrun stops every worker" in res.output
    assert "storage_load" in (tmp_path / "o" / "project.md").read_text()
    off = CliRunner().invoke(cli, ["project", str(run), "--set", "gpu_phases=false", "--out", str(tmp_path / "p")])
    assert "GPU phases left out (gpu_phases = false)" in off.output and "set by the user" in off.output


def test_every_strategy_declares_what_it_pays_and_credits_a_phase_it_has() -> None:
    from bench.scenario.registry import discover
    from bench.scenario.strategy import STRATEGIES

    discover()
    assert set(gpu.PAYS) == set(STRATEGIES.names())
    for name, pays in gpu.PAYS.items():
        phases = [phase for phase, _ in STRATEGIES[name].phases]
        assert pays.comm == "none" or pays.formed_by in phases, (name, pays.formed_by, phases)


def test_a_line_through_points_never_falls_and_one_point_is_constant() -> None:
    assert gpu.through(((10.0, 100.0), (20.0, 1.0)), "linear", 1e6) == pytest.approx(50.5)
    assert gpu.through(((10.0, 7.0),), "linear", 1e6) == 7.0
    assert gpu.through(((2.0, 1.0), (1024.0, 10.0)), "log", 2.0**20) == pytest.approx(20.0)


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("comm_init_at=[[0, 5]]", "comm_init_at"),
        ("comm_init_at=[[2048, -1]]", "comm_init_at"),
        ("comm_init_at=[[2048, 5], [2048, 6]]", "comm_init_at"),
        ("host_start_at=[[1.5, 5]]", "host_start_at"),
        ("host_start_at=[]", "host_start_at"),
        ("comm_init_growth='cubic'", "comm_init_growth"),
        ("storage_read_gb_s=0", "storage_read_gb_s"),
        ("gpu_phases=1", "gpu_phases"),
    ],
)
def test_bad_gpu_phase_values_are_one_line_naming_the_key(tmp_path: Path, setting: str, key: str) -> None:
    run = write_run(tmp_path, "s", {"strategy=restart": [trial(0.1, 8.0, ttfs_s=8.1)] * 3})
    res = CliRunner().invoke(cli, ["project", str(run), "--set", setting])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and f"--set: {key}: expected" in lines[0], res.output
    bad = tmp_path / "c.toml"
    bad.write_text(setting.replace("=", " = ", 1) + "\n")
    res = CliRunner().invoke(cli, ["project", str(run), "--cluster", str(bad)])
    assert res.exit_code == 2 and f"c.toml: {key}: expected" in res.output


def test_a_cluster_file_sets_the_published_points(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("comm_init_at = [[16384, 150]]\nstorage_read_gb_s = 7257\nhost_start_growth = 'constant'\n")
    c = assumptions.cluster(f)
    assert c.comm_init_at == ((16384.0, 150.0),) and gpu.comm_init_s(c, 100_000) == 150.0
    assert gpu.host_start_s(c, 12_500) == pytest.approx(32.5)  # the two points' mean


def test_control_plane_time_added_to_a_phase_is_not_credited_against_the_communicators(tmp_path: Path) -> None:
    # reinit without a restore phase: a scale run's resume step (membership/resume) adds
    # its growth to reconfigure. That is the store's agreement, not the group's formation,
    # so the communicators still count beyond reconfigure's own 1.8 s.
    from bench.project.model import Scaling, project
    from bench.project.source import points
    from bench.scale.growth import choose

    run = write_run(tmp_path, "s", {"strategy=reinit": [trial(1.0, 9.0, ttfs_s=10.0)] * 3})
    point = points(load(run))[0]
    w = np.repeat([8.0, 64.0, 512.0, 4096.0], 2)
    y = 0.01 * w * np.tile([1.0, 1.02], 4)  # 10 ms a rank, two repetitions a size
    curve = Scaling(choose(w.tolist(), y.tolist(), relative=True), w, y, float, True, "resume")
    assert curve.choice.fit.model == "linear"
    cell = project(point, assumptions.cluster(None, BIG), {}, added={"reconfigure": curve}, replicates=20).cells[0]
    assert cell.gpu["comm_init"].counted == pytest.approx(comm(8000) - 1.8)
    assert cell.shares["recover"] > 1e-3 * 0.01 * 7996 / 2  # the resume step's growth is there too
