"""Faults of the machine end to end: a rank's memory cgroup limit reached (``oom``) and
the checkpoint file system full (``storage``), each under one strategy, from the
scenario to trials.csv; and nothing of the set-up outlives the trial."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from injectors import cgroup, storage
from tests.integ.conftest import rows

pytestmark = [pytest.mark.integ, pytest.mark.root]

SCENARIO = """
name = "m"
[workload]
kind = "ddp"
world_size = 2
steps = {steps}
pg_timeout_s = 10
[[faults]]
kind = "{kind}"
duration_s = {duration}
{knobs}
target = {{ ranks = [{target}] }}
trigger = {{ at_step = 30 }}
[recovery]
strategy = "{strategy}"
{recovery}
[measure]
trials = 1
deadline_s = 90
"""


def _trial_groups() -> list[Path]:
    """ftbench's trial groups under this process's own memory group."""
    h = cgroup.hierarchy()
    assert h is not None
    parent = h.own() if h.version == 1 else h.mount
    return [p for p in parent.iterdir() if p.is_dir() and p.name.startswith(cgroup.PREFIX)]


@pytest.mark.timeout(120)
def test_the_oom_killer_ends_a_rank_over_its_limit_and_failstop_fails(run_scenario) -> None:
    if os.geteuid() != 0 or cgroup.unavailable():
        pytest.skip(f"memory cgroups: {cgroup.unavailable()}")
    before = _trial_groups()
    text = SCENARIO.format(kind="oom", steps=3000, duration=20, knobs="", target=1, strategy="failstop", recovery="")
    (r,) = rows(run_scenario(text))
    assert r["outcome"] == "failed", r
    assert r["mechanism"].startswith("memory cgroup v"), r
    assert "rank 1" in r["error"] and "was ended by the kernel's OOM killer" in r["error"], r
    assert "out of memory: killed process" in r["error"].lower(), r
    assert r["ttd_s"] > 0
    assert _trial_groups() == before, "the trial's memory groups outlived it"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_full_checkpoint_file_system_crashes_restarts_save_and_the_job_recovers_once_it_is_freed(
    run_scenario,
) -> None:
    if os.geteuid() != 0 or storage.unavailable():
        pytest.skip(f"tmpfs: {storage.unavailable()}")
    text = SCENARIO.format(
        kind="storage",
        steps=300,
        duration=10,
        knobs="size_mb = 32",
        target=0,
        strategy="restart",
        recovery="[recovery.restart]\ncheckpoint_every = 20",
    )
    report = run_scenario(text)
    (r,) = rows(report)
    assert r["mechanism"].startswith("tmpfs of 33554432 bytes"), r
    # restart's rank 0 writes the checkpoint: its save meets ENOSPC and the rank crashes,
    # torchrun restarts the job; once the filler is gone a save succeeds again.
    assert r["outcome"] == "recovered", r
    events = (report.rundir.path / "events").rglob("rank0-*.jsonl")
    assert any('"crash"' in p.read_text() for p in events), "rank 0's save did not fail"
    with open("/proc/self/mounts") as fh:
        assert storage.SOURCE not in fh.read(), "the checkpoint tmpfs outlived the trial"
