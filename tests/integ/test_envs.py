"""``ftbench run --env``: a scenario run in several environments from the CLI, one of
them built for real (torch and torchft 0.2.0 from the package index), every row tagged
with the versions that ran it, and one environment compared against the other."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.procs import venvs
from bench.procs.machine import stack_versions

pytestmark = pytest.mark.integ

ROOT = Path(__file__).resolve().parents[2]
OLD = "torch==2.13.0 torchft==0.2.0"

SCENARIO = """
name = "envs"
[workload]
kind = "ddp"
world_size = 3
steps = 120
pg_timeout_s = 10
[[faults]]
kind = "kill"
target = { ranks = [1] }
trigger = { at_step = 30, jitter = "step" }
[recovery]
strategy = "torchft"
[recovery.torchft]
heartbeat_timeout_ms = 2000
restart_delay_s = 1.0
ddp_workaround = "off"
[measure]
trials = 1
deadline_s = 60
"""


def ftbench(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


@pytest.fixture(scope="module")
def old_torchft() -> venvs.Environment:
    """torchft 0.2.0's environment, built (or found in the cache) before the run, so that
    a machine without the package index skips with the reason instead of failing."""
    if stack_versions()["torchft"] is None:
        pytest.skip("torchft is not installed in the harness (pip install 'ftbench[torchft]')")
    try:
        return venvs.prepare(OLD)
    except venvs.EnvBuildError as err:
        pytest.skip(f"cannot build the environment {OLD!r} here: {err}")


@pytest.mark.timeout(420)
def test_two_environments_side_by_side(old_torchft: venvs.Environment, tmp_path: Path) -> None:
    assert old_torchft.versions["torchft"] == "0.2.0"
    scenario = tmp_path / "envs.toml"
    scenario.write_text(SCENARIO)
    done = ftbench("run", str(scenario), "--env", OLD, "--env", "", "--out", str(tmp_path), timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (tmp_path / "envs").iterdir()
    with open(run / "trials.csv") as fh:
        rows = {r["env"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {OLD, ""}
    old, own = rows[OLD], rows[""]
    harness = stack_versions()
    assert (old["torchft"], own["torchft"]) == ("0.2.0", harness["torchft"])
    assert old["torch"].startswith("2.13.0") and own["torch"] == harness["torch"]
    assert old["python"] == own["python"] == harness["python"]
    # 0.2.0's DDP without the workaround: the survivors recover, or its comm hook takes
    # them down, which is an outcome named for what it is, never a harness crash.
    assert old["outcome"] in ("recovered", "failed"), old
    if old["outcome"] == "failed":
        assert old["error"].startswith("survivors crashed") and float(old["survivor_crashes"]) >= 1, old
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "complete"
    assert info["environments"][OLD]["torchft"] == "0.2.0"

    compared = ftbench("compare", str(run), "--env-baseline", OLD, "--metric", "ttd_s", timeout=120)
    assert compared.returncode == 0, compared.stderr
    assert f"[harness env vs {OLD}]" in compared.stdout
    report = ftbench("report", str(run), timeout=300)
    assert report.returncode == 0, report.stderr
    text = (run / "report.md").read_text()
    assert f"env={OLD}" in text and "environment " + OLD in text
