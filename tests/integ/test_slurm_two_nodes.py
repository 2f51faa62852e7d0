"""ftbench across two real Slurm nodes on one machine (tools/slurm/localslurm.py): two
slurmd, each in its own host namespaces (network, UTS named n0/n1, mount with the
cluster's hosts file), and a slurmctld on a third host, linked by a bridge.

The shipped ``tools/slurm/ftbench.sbatch`` runs ``node-loss-2hosts`` across them as a
user submits it (``sbatch --nodes=2 --ntasks-per-node=1``): the harness in the batch shell
on n0, one ``ftbench host --serve`` per node through srun. Then a node is lost under the
running job (tools/slurm/node_loss.py): what Slurm does and when, beside ftbench's own
figures. After each, nothing of the cluster may be left: no daemon, no slurmstepd, no job
process, no namespace.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.procs.hygiene import MARKER
from tests.integ.slurm import TEST_TIMERS, LocalSlurm, SlurmUnavailable, leftover_namespaces, load_tool, started
from tests.integ.test_cluster import agent_processes
from tests.integ.test_local_slurm import _alive

pytestmark = [
    pytest.mark.integ,
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="a local Slurm cluster needs root (namespaces, daemons as root)"),
]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "slurm" / "ftbench.sbatch"


def job_env() -> dict[str, str]:
    """What the job needs from the submitter: this checkout's ftbench on this Python. No
    FTBENCH_CONTROLLER: the script finds the head node's address by its name, as on a site."""
    return {"FTBENCH": f"{sys.executable} -m bench", "FTBENCH_WAIT_S": "120", "PYTHONPATH": str(ROOT)}


@pytest.fixture
def two_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalSlurm]:
    """A started two-node cluster under ``tmp_path``; skips the test where Slurm cannot run."""
    monkeypatch.delenv(MARKER, raising=False)  # the job is not a child of this test's runs
    yield from started(LocalSlurm(tmp_path / "slurm", nodes=2))


def assert_nothing_left(cluster: LocalSlurm, daemons: dict[str, int]) -> None:
    """No daemon, no process in the cluster's namespaces, no namespace, no agent's process."""
    assert [f"{name} {pid}" for name, pid in daemons.items() if _alive(pid)] == []
    assert cluster.namespace_pids() == []
    assert set(cluster.namespaces).isdisjoint(leftover_namespaces())
    assert agent_processes(within_s=5) == []


@pytest.mark.timeout(600)
def test_node_loss_2hosts_runs_across_two_slurm_nodes(two_nodes: LocalSlurm, tmp_path: Path) -> None:
    out = tmp_path / "results"
    job = two_nodes.sbatch(
        SCRIPT,
        "node-loss-2hosts",
        "--trials",
        "1",
        "--out",
        str(out),
        options=("--nodes=2", "--ntasks-per-node=1"),
        env=job_env(),
        cwd=tmp_path,
    )
    state = two_nodes.wait(job, timeout_s=480)
    log = two_nodes.job_output(job)
    assert state == "COMPLETED", f"job {job} {state}:\n{log}"
    assert two_nodes.show("job", str(job))["NodeList"] == "n[0-1]"

    (run_json,) = out.glob("node-loss-2hosts/*/run.json")
    info = json.loads(run_json.read_text())
    assert info["status"] == "complete", log
    cluster = {h: (a["hostname"], a["address"]) for h, a in info["cluster"].items()}
    assert cluster == {"h0": ("n0", "10.251.0.1"), "h1": ("n1", "10.251.0.2")}, "one agent per node, by its own name"
    rows = [json.loads(line) for line in (run_json.parent / "trials.jsonl").read_text().splitlines()]
    outcomes = {r["strategy"]: r["outcome"] for r in rows}
    assert outcomes == {"failstop": "failed", "reinit": "recovered", "restart": "recovered"}, rows
    for r in rows:
        assert 0 < r["ttd_s"] < 5, r
    # Both nodes share this machine's CLOCK_MONOTONIC: every offset's truth is 0.
    clocks = [c for point in info["host_clocks"].values() for trial in point.values() for c in trial.values()]
    assert len(clocks) == 6
    for c in clocks:
        assert abs(c["offset_ns"]) <= c["err_ns"], c
    assert log.count("the run is over after 3 trial(s)") == 2, log

    daemons = two_nodes.daemon_pids
    assert set(daemons) == {"munged", "slurmctld", "slurmd-n0", "slurmd-n1"}
    assert two_nodes.close() == []
    assert_nothing_left(two_nodes, daemons)


STEPS = 20000
"""Long enough (about 60 s at 3 ms a step on 2 cores) to train on past n1's DOWN."""


@pytest.mark.timeout(600)
def test_a_node_lost_under_the_running_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """n1 killed whole (slurmd, slurmstepd, the agent) at the moment ftbench's fault kills
    h1's ranks. ftbench's reinit recovers on n0 within seconds; Slurm marks n1 DOWN after
    SlurmdTimeout and, the job and the agents' step being --no-kill (the script's), only
    removes n1 from the job: the survivors train on past it, every step, and the job ends
    COMPLETED when the run is over."""
    monkeypatch.delenv(MARKER, raising=False)
    node_loss = load_tool("node_loss")
    timers = {**TEST_TIMERS, "SlurmdTimeout": "10", "KillWait": "2", "MessageTimeout": "5"}
    try:
        result: dict[str, Any] = node_loss.experiment(
            tmp_path,
            timers=timers,
            how="kill",
            ftbench_set=(f"workload.steps={STEPS}", "measure.deadline_s=400"),
            ftbench=job_env()["FTBENCH"],
        )
    except SlurmUnavailable as e:
        pytest.skip(str(e))
    summary = node_loss.summary(result)
    assert result.get("settled", True), summary
    assert 0 <= result["inject_to_loss_s"] < 1, summary
    assert result["left_namespaces"] == [] and result["left_processes"] == [], summary
    assert agent_processes(within_s=5) == []

    (trial,) = result["ftbench"]["trials"]
    assert result["ftbench"]["status"] == "complete", summary
    assert trial["outcome"] == "recovered", summary
    assert 0 < float(trial["ttd_s"]) < 5, summary
    assert int(trial["steps_done"]) == STEPS, summary

    def first(what: str, word: str) -> float:
        return min(s["t_s"] for s in result["states"] if s["what"] == what and word in s["state"])

    timeout = float(timers["SlurmdTimeout"])
    down = first("node n1", "DOWN")
    # DOWN once n1's last answer is SlurmdTimeout old at a ping cycle (every SlurmdTimeout/3):
    # its last answer came at most a ping interval before the loss.
    assert timeout * 2 / 3 - 1 <= down <= timeout + 2 * timeout / 3 + 15, summary
    ctld = [e["line"] for e in result["logs"]["slurmctld"]]
    assert any("Nodes n1 not responding, setting DOWN" in line for line in ctld), summary
    assert any("Removing failed node n1 from JobId" in line for line in ctld), summary
    assert first("job", "COMPLETED") > down, summary
    survivors = [t for r, t in result["last_step_s"].items() if r in ("rank0", "rank1")]
    assert survivors and min(survivors) > down, "the survivors trained on past n1's DOWN"
