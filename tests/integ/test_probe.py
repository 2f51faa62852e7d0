"""The probe in a real interpreter: what it records of a small torch program that
imports nothing of ftbench, that it leaves the program's own behaviour alone, and that
a ``sitecustomize`` of the job's own still runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.probe import environment

pytestmark = [pytest.mark.integ, pytest.mark.timeout(120)]

PROGRAM = """
import subprocess, sys
import torch
import torch.distributed as dist
model = torch.nn.Linear(4, 1)
opt = torch.optim.Adam(model.parameters())
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
# a helper process that inherits this rank's RANK is not a rank
subprocess.run([sys.executable, "-c", "import torch"], check=True)
try:
    dist.all_reduce(torch.ones(1))
except (RuntimeError, ValueError) as err:
    print("caught", type(err).__name__, flush=True)
raise SystemExit(7)
"""


def records(folder: Path) -> list[dict[str, object]]:
    return [json.loads(line) for path in sorted(folder.glob("probe-*.jsonl")) for line in path.read_text().splitlines()]


def test_the_probe_records_steps_raises_and_exits_and_changes_nothing(tmp_path: Path) -> None:
    own = tmp_path / "own-site"
    own.mkdir()
    (own / "sitecustomize.py").write_text(f"open({str(tmp_path / 'own-ran')!r}, 'w').close()\n")
    env = environment(tmp_path, dict(os.environ, RANK="3", PYTHONPATH=str(own)))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROGRAM)], env=env, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 7 and "caught" in done.stdout, done.stderr  # the program's own behaviour
    assert (tmp_path / "own-ran").exists(), "the job's own sitecustomize was hidden"
    found = records(tmp_path)
    starts = [e for e in found if e["event"] == "proc_start"]
    assert [(e["rank"], e["src"]) for e in starts] == [(3, "rank")], "only the rank, not its helper, is rank 3"
    steps = [e for e in found if e["event"] == "step_end"]
    assert [e["count"] for e in steps] == [1, 2, 3]
    assert [e["step"] for e in steps] == [1, 2, 3], "Adam's own count agrees"
    (raised,) = [e for e in found if e["event"] == "raised"]
    assert raised["site"] == "all_reduce" and raised["step"] == 3
    (end,) = [e for e in found if e["event"] == "proc_exit"]
    assert end["steps"] == 3 and 0 < float(end["probe_s"]) < 0.1
