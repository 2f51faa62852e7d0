"""A strategy from a folder outside ftbench runs end to end from the CLI, editing nothing."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integ

ROOT = Path(__file__).resolve().parents[2]

SCENARIO = """
name = "plugin"
[workload]
kind = "ddp"
world_size = 2
steps = 60
pg_timeout_s = 10
[[faults]]
kind = "kill"
target = { ranks = [1] }
trigger = { at_step = 20 }
[recovery]
strategy = "giveup"
[recovery.giveup]
exit_code = 2
[measure]
trials = 1
deadline_s = 60
"""


def ftbench(*args: str, plugins: str = "tests.plugins.giveup") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, FTBENCH_PLUGINS=plugins, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT
    )


@pytest.mark.timeout(150)
def test_a_strategy_from_a_test_folder_runs_from_the_cli(tmp_path: Path) -> None:
    listed = ftbench("list")
    assert "giveup" in listed.stdout and "test plug-in" in listed.stdout
    scenario = tmp_path / "plugin.toml"
    scenario.write_text(textwrap.dedent(SCENARIO))
    unknown = ftbench("validate", str(scenario), plugins="")
    assert unknown.returncode == 2 and "recovery.strategy" in unknown.stderr  # not found without the plug-in
    done = ftbench("run", str(scenario), "--out", str(tmp_path / "results"))
    assert done.returncode == 0, done.stderr
    (trials,) = (tmp_path / "results" / "plugin").glob("*/trials.csv")
    (row,) = list(csv.DictReader(trials.open()))
    assert row["strategy"] == "giveup" and row["outcome"] == "failed", row
    assert 0 < float(row["ttd_s"]) < 1.0  # a SIGKILLed peer's sockets are reset at once
    events = "".join(p.read_text() for p in (trials.parent / "events").rglob("rank*.jsonl"))
    assert '"gave_up"' in events and '"exitcode": 2' in events
