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
from bench.procs.store import free_port

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


WRAPS = """
import io, os, sys
import torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
folder = sys.argv[1]
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
torch.save(model.state_dict(), os.path.join(folder, "m.pt"))
model.load_state_dict(torch.load(os.path.join(folder, "m.pt"), weights_only=True))
ddp = DDP(model)
# a plain value beside the tensors: DCP reads it back with torch.load, inside its own load
dcp.save({"m": model.state_dict(), "step": 7}, checkpoint_id=os.path.join(folder, "dcp"))
state = {"m": model.state_dict(), "step": 0}
dcp.load(state, checkpoint_id=os.path.join(folder, "dcp"))
try:
    torch.load(io.BytesIO(b"not a checkpoint"))
except Exception as err:
    print("load failed:", type(err).__name__)
sharded = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
for layer in sharded:
    fully_shard(layer)
fully_shard(sharded)
sharded(torch.randn(2, 4)).sum().backward()
print("step", state["step"], torch.load.__name__, fully_shard.state is not None, flush=True)
dist.destroy_process_group()
"""


def test_the_probe_sees_a_jobs_model_wrapping_and_checkpoint_loads(tmp_path: Path) -> None:
    """What a restarted job does before its first step: DDP's and FSDP2's construction,
    torch.load and DCP's load, each bracketed once (DCP's own torch.load inside its load
    is not a second load), and a load that fails has no end."""
    events, work = tmp_path / "events", tmp_path / "work"
    events.mkdir()
    work.mkdir()
    world = dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    env = environment(events, dict(os.environ, **world))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WRAPS), str(work)], env=env, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    assert "load failed: UnpicklingError" in done.stdout and "step 7 load True" in done.stdout, done.stdout
    found = records(events)
    wrapped = [e["how"] for e in found if e["event"] == "model_wrapped"]
    assert wrapped == ["DistributedDataParallel", "fully_shard", "fully_shard", "fully_shard"]
    starts = [e["how"] for e in found if e["event"] == "restore_start"]
    assert starts == ["torch.load", "torch.distributed.checkpoint.load", "torch.load"]
    ends = [(e["how"], e.get("bytes")) for e in found if e["event"] == "restore_end"]
    folder = sum(p.stat().st_size for p in (work / "dcp").iterdir() if p.is_file())
    assert ends == [("torch.load", (work / "m.pt").stat().st_size), ("torch.distributed.checkpoint.load", folder)]
    assert {e["gen"] for e in found if e["event"] in ("model_wrapped", "restore_end")} == {0}
