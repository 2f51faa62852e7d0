"""Dogfooding: the project's own scenario, run for real through the CLI, must pass the
service levels first principles give it (scenarios/ci-stall-slo.toml), so that a change
that breaks the measurement itself (a clock, a detection, a phase) cannot land. And the
pytest plugin, run for real from a user's test suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.child_pytest import child_pytest

pytestmark = pytest.mark.integ

ROOT = Path(__file__).resolve().parents[2]


def ftbench(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.timeout(300)
def test_ci_stall_scenario_passes_its_service_levels(tmp_path: Path) -> None:
    run = ftbench("run", str(ROOT / "scenarios" / "ci-stall-slo.toml"), "--out", str(tmp_path), timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    junit = tmp_path / "junit.xml"
    gate = ftbench("gate", str(tmp_path / "ci-stall-slo"), "--junit", str(junit), timeout=60)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "gate: pass" in gate.stdout
    suite = ET.parse(junit).getroot()
    assert int(suite.attrib["tests"]) == 4 and suite.attrib["failures"] == "0" and suite.attrib["errors"] == "0"
    # the same run against itself as a baseline: 3 trials are too few to compare (exit 2, not a pass)
    self_gate = ftbench(
        "gate", str(tmp_path / "ci-stall-slo"), "--baseline", str(tmp_path / "ci-stall-slo"), "--no-slo", timeout=60
    )
    assert self_gate.returncode == 2, self_gate.stdout + self_gate.stderr


KILL = """
name = "plugin-kill"
[workload]
kind = "ddp"
world_size = 3
steps = 60
pg_timeout_s = 10
[[faults]]
kind = "kill"
target = {{ ranks = [2] }}
trigger = {{ at_step = 20 }}
[recovery]
strategy = "reinit"
[measure]
trials = 2
deadline_s = 60
"""

USER_TEST = """
def test_kill_recovers(ftbench_scenario):
    result = ftbench_scenario({scenario!r}, metric="ttr_s")
    assert result.outcomes() == {{"recovered": 2}}
    assert 0 < result.median() < 5
"""


@pytest.mark.timeout(240)
def test_pytest_plugin_runs_a_scenario_into_pytest_benchmark(tmp_path: Path) -> None:
    pytest.importorskip("pytest_benchmark")
    scenario = tmp_path / "plugin-kill.toml"
    scenario.write_text(KILL.format())
    (tmp_path / "test_user.py").write_text(USER_TEST.format(scenario=str(scenario)))
    out = tmp_path / "bench.json"
    proc = child_pytest(tmp_path, "test_user.py", f"--benchmark-json={out}", timeout_s=200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (bench,) = json.loads(out.read_text())["benchmarks"]
    assert bench["stats"]["rounds"] == 2 and bench["extra_info"]["outcomes"] == {"recovered": 2}
    assert 0 < bench["stats"]["max"] < 5
