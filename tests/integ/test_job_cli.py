"""The everyday form of a user's own job: ``ftbench run --job ... -- torchrun ...``, for
real, and the run it writes read by ``report``, ``compare`` and ``gate`` like any other.
Two ranks, the smallest world in which one dies and the other sees it."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integ

ROOT = Path(__file__).resolve().parents[2]


def ftbench(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    # torchrun's restarts on gloo need their own store here (docs/your-job.md)
    env = dict(os.environ, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.timeout(300)
def test_a_torchrun_job_from_the_command_line_is_measured_and_read_like_any_run(tmp_path: Path) -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip(f"no torchrun beside {sys.executable}")
    command = [str(torchrun), "--nproc-per-node", "2", "--max-restarts", "1", "--monitor-interval", "0.1"]
    command += ["examples/ddp/train.py", "--steps", "80", "--ckpt-dir", "{checkpoint_dir}", "--ckpt-every", "10"]
    # the kill after step 20, just checkpointed: the restarted job typically loses nothing
    run = ftbench(
        "run", "--job", "--fault", "kill", "--target", "1", "--at-step", "20", "--trials", "2",
        "--name", "cli-job", "--out", str(tmp_path), "--", *command, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    (rundir,) = (tmp_path / "cli-job").iterdir()
    with open(rundir / "trials.csv") as fh:
        got = list(csv.DictReader(fh))
    assert [r["outcome"] for r in got] == ["recovered", "recovered"], got
    for r in got:
        assert r["strategy"] == "command" and float(r["ttd_s"]) > 0 and float(r["ttr_s"]) > 0, r
        # the checkpoint every 10 steps and the resume step from the job's own output bound what was lost
        assert 0 <= float(r["steps_lost"]) <= 10, r
        # the restarted job's own DDP construction and torch.load, seen by the probe, are phases of
        # their own, and catchup holds only the steps it computed again
        assert float(r["phase_build_s"]) > 0 and float(r["phase_restore_s"]) > 0, r
        assert float(r["restore_bytes"]) > 0 and float(r["phase_first_step_s"]) > 0, r
        assert (float(r["phase_catchup_s"]) == 0) == (float(r["steps_lost"]) == 0), r
        assert "phase_" not in r.get("blind", ""), r["blind"]
        phases = [float(v) for k, v in r.items() if k.startswith("phase_") and v != ""]
        assert sum(phases) == pytest.approx(float(r["downtime_s"]), abs=1e-6), r
    assert "build" in run.stdout and "restore" in run.stdout and "first_step" in run.stdout, run.stdout
    info = json.loads((rundir / "run.json").read_text())
    assert "torchrun" in json.dumps(info) and "examples/ddp/train.py" in json.dumps(info)
    report = ftbench("report", str(rundir), timeout=120)
    assert report.returncode == 0, report.stdout + report.stderr
    compare = ftbench("compare", str(rundir), str(rundir), timeout=60)
    assert compare.returncode == 0, compare.stdout + compare.stderr
    # Against itself as a baseline, 2 trials are too few to decide: exit 2, said, not a pass.
    gate = ftbench("gate", str(rundir), "--baseline", str(rundir), "--no-slo", timeout=60)
    assert gate.returncode == 2, gate.stdout + gate.stderr
