"""A private one-node Slurm cluster (:mod:`tests.integ.slurm`) really runs batch jobs.

The benchmark's Slurm script starts ``srun ... ftbench host ... &`` and then runs
``ftbench run ...`` in the batch shell itself; this test does the same with shell commands
and then checks that tearing the cluster down leaves no daemon and no namespace behind.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integ.slurm import LocalSlurm, started
from tests.integ.test_cluster import ONE_TRIAL

pytestmark = [
    pytest.mark.integ,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="a local Slurm cluster needs root (netns, daemons as root)"),
]


@pytest.fixture
def local_slurm(tmp_path: Path) -> Iterator[LocalSlurm]:
    """A started one-node cluster under ``tmp_path``; skips the test where Slurm cannot run."""
    yield from started(LocalSlurm(tmp_path / "slurm"))


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is dead: it only waits to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.mark.timeout(180)
def test_batch_shell_runs_while_a_background_srun_step_runs(local_slurm: LocalSlurm, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "job.sh"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/bash
            #SBATCH --nodes=1 --ntasks=2
            set -u
            srun --ntasks=2 bash -c 'echo $SLURM_PROCID > {out}/task-$SLURM_PROCID; sleep 1' &
            echo "$SLURM_JOB_ID" > {out}/batch-shell
            wait
            """
        )
    )
    job = local_slurm.sbatch(script, cwd=tmp_path)
    state = local_slurm.wait(job, timeout_s=90)
    assert state == "COMPLETED", f"job {job} {state}: {local_slurm.job_output(job)}"
    assert (out / "task-0").read_text().strip() == "0"
    assert (out / "task-1").read_text().strip() == "1"
    assert (out / "batch-shell").read_text().strip() == str(job)

    daemons = local_slurm.daemon_pids
    assert set(daemons) == {"munged", "slurmctld", "slurmd-n0"}
    local_slurm.__exit__(None, None, None)  # the fixture's exit then finds nothing left to do

    assert [f"{name} {pid}" for name, pid in daemons.items() if _alive(pid)] == []
    assert local_slurm.namespace_pids() == []
    assert not local_slurm.netns_path.exists()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=15, check=True).stdout
    assert set(local_slurm.namespaces).isdisjoint(listed.split())


@pytest.mark.timeout(300)
def test_the_shipped_batch_script_runs_a_scenario(
    local_slurm: LocalSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tools/slurm/ftbench.sbatch as a user submits it: srun starts one host agent per task,
    the harness runs in the batch shell and meets them at --agents-at. One node here, so
    its two tasks are the two hosts."""
    import json
    import sys

    from bench.procs.hygiene import MARKER
    from bench.procs.store import free_port

    monkeypatch.delenv(MARKER, raising=False)  # the job is not a child of this test's runs
    scenario = tmp_path / "slurm.toml"
    scenario.write_text(ONE_TRIAL.replace('name = "cluster"', 'name = "slurm"'))
    script = Path(__file__).resolve().parents[2] / "tools" / "slurm" / "ftbench.sbatch"
    env = {
        "FTBENCH": f"{sys.executable} -m bench",
        "FTBENCH_CONTROLLER": "127.0.0.1",
        "FTBENCH_PORT": str(free_port()),
        "FTBENCH_WAIT_S": "120",
        "PYTHONPATH": str(script.parents[2]),
    }
    out = tmp_path / "results"
    job = local_slurm.sbatch(
        script,
        str(scenario),
        "--out",
        str(out),
        options=("--nodes=1", "--ntasks=2", "--ntasks-per-node=2"),
        env=env,
        cwd=tmp_path,
    )
    state = local_slurm.wait(job, timeout_s=240)
    log = local_slurm.job_output(job)
    assert state == "COMPLETED", f"job {job} {state}:\n{log}"
    (run_json,) = out.glob("slurm/*/run.json")
    info = json.loads(run_json.read_text())
    assert info["status"] == "complete", log
    assert sorted(info["cluster"]) == ["h0", "h1"]
    (row,) = [json.loads(line) for line in (run_json.parent / "trials.jsonl").read_text().splitlines()]
    assert row["outcome"] == "recovered", row
    assert "the run is over after 1 trial(s)" in log
