"""Faults from outside, on a job ftbench did not build: the plain DDP example of two
ranks, each started as its own command, under every fault family that acts from
outside a rank (a rank's memory limit, its checkpoint file system, its whole host, its
link). Each checks what the fault did and what the job showed, from trials.csv."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.run.runner import RunReport
from injectors import cgroup, storage
from injectors.link import system
from tests.integ.conftest import rows

pytestmark = [pytest.mark.integ]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp" / "train.py"


def scenario(fault: str, *, steps: int = 3000, extra: str = "", ckpt: bool = False, deadline_s: int = 60) -> str:
    """Two commands, one per rank and host, each the example script on its own rank."""
    args = [sys.executable, str(EXAMPLE), "--steps", str(steps), "--pg-timeout-s", "5", "--hard-exit"]
    args += ["--log-every", "10"]
    if ckpt:
        args += ["--ckpt-dir", "{checkpoint_dir}", "--ckpt-every", "5"]
    command = "[[workload.commands]]\nargv = {argv}\nper_rank = true\nranks = [{r}]\nhost = {r}\n"
    commands = "".join(command.format(argv=json.dumps(args), r=r) for r in (0, 1))
    return f"""
name = "command-faults"
[workload]
kind = "command"
world_size = 2
steps = {steps}
pg_timeout_s = 5
{extra}
{commands}
[[faults]]
{fault}
[measure]
trials = 1
deadline_s = {deadline_s}
"""


def test_a_whole_host_of_a_command_job_goes_down(run_scenario: Callable[..., RunReport]) -> None:
    (row,) = rows(run_scenario(scenario('kind = "host-down"\ntarget = { host = 1 }\ntrigger = { at_step = 20 }')))
    assert row["outcome"] == "failed" and row["target"] == "1", row
    assert 0 < row["ttd_s"] < 5, "rank 0 learns of its peer's death from its socket, not its timeout"


@pytest.mark.root
@pytest.mark.timeout(120)
def test_the_oom_killer_ends_a_command_jobs_rank(run_scenario: Callable[..., RunReport]) -> None:
    if os.geteuid() != 0 or cgroup.unavailable():
        pytest.skip(f"memory cgroups: {cgroup.unavailable()}")
    text = scenario('kind = "oom"\nduration_s = 20\ntarget = { ranks = [1] }\ntrigger = { at_step = 20 }')
    (row,) = rows(run_scenario(text))
    assert row["outcome"] == "failed" and row["mechanism"].startswith("memory cgroup"), row
    assert "OOM killer" in row["error"], row


@pytest.mark.root
@pytest.mark.timeout(120)
def test_a_full_checkpoint_folder_crashes_the_jobs_save(run_scenario: Callable[..., RunReport]) -> None:
    if os.geteuid() != 0 or storage.unavailable():
        pytest.skip(f"tmpfs: {storage.unavailable()}")
    fault = 'kind = "storage"\nduration_s = 5\nsize_mb = 16\ntarget = { ranks = [0] }\ntrigger = { at_step = 20 }'
    report = run_scenario(scenario(fault, ckpt=True))
    (row,) = rows(report)
    assert row["mechanism"].startswith("tmpfs"), row
    # rank 0's torch.save meets the full file system (torch says "unexpected pos" of its
    # zip writer): an uncaught error, so the rank ends; rank 1 then sees its peer go, and
    # a plain launch does not restart.
    assert row["outcome"] == "failed", row
    (probe,) = (report.rundir.path / "events").rglob("probe-rank0-*.jsonl")
    raised = [json.loads(line) for line in probe.read_text().splitlines() if '"raised"' in line]
    assert raised and raised[0]["site"] == "uncaught" and "inline_container" in raised[0]["error"], raised


@pytest.mark.root
@pytest.mark.alone
@pytest.mark.timeout(150)
def test_a_command_jobs_host_is_cut_off_and_found_at_its_timeout(run_scenario: Callable[..., RunReport]) -> None:
    why = system.available()
    if why:
        pytest.skip(f"network namespaces: {why}")
    fault = 'kind = "partition"\nduration_s = 8\ntarget = { ranks = [1] }\ntrigger = { at_step = 20 }'
    (row,) = rows(run_scenario(scenario(fault)))
    assert row["outcome"] == "failed", row
    assert 5.0 <= row["ttd_s"] < 8.0, "a partition is seen at the job's own 5 s timeout, before it heals"
