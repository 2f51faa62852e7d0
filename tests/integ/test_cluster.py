"""Host agents that the cluster started, not the harness (``ftbench host --serve``, as
srun or ssh start them), joining a run at ``ftbench run --agents-at`` (docs/multihost.md).

The agents here are started the way ssh would start them: not children of the run, no
run marker, each in a time namespace whose CLOCK_MONOTONIC runs (i + 1) x 1000 s ahead of
the harness's. The harness is told nothing of those shifts; a wrong clock alignment
would show as figures off by 1000 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.hosts.auth import SECRET_ENV
from bench.hosts.cluster import Cluster
from bench.procs.hygiene import MARKER, alive, marked
from bench.procs.store import free_port
from tests.integ.conftest import rows

pytestmark = [
    pytest.mark.integ,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None, reason="time namespaces need root and unshare"
    ),
]

SHIFT_S = 1000
SECRET = "a-secret-the-cluster-recipe-shares-0123456789"
ONE_TRIAL = """
name = "cluster"
[workload]
kind = "ddp"
world_size = 4
steps = 120
pg_timeout_s = 5
[launch]
ranks_per_host = 2
agents = true
[[faults]]
kind = "kill"
target = { host = 1 }
trigger = { at_step = 40 }
[recovery]
strategy = "reinit"
[measure]
trials = 1
deadline_s = 60
"""
"""2 hosts x 2 ranks under reinit, one trial of a host's ranks killed."""
SCENARIO = (
    ONE_TRIAL
    + """[sweep]
"faults.0.kind" = ["host-down", "kill"]
"""
)
"""host-down first: h1's agent goes silent for that trial and must serve the next one."""


def start_agents(port: int, n: int, logs: Path, secret: str = SECRET) -> list[subprocess.Popen[bytes]]:
    """``ftbench host --serve`` on every host, as ssh would start it, with the run's
    secret in its environment."""
    env = {k: v for k, v in os.environ.items() if k != MARKER} | {SECRET_ENV: secret}
    agents = []
    for i in range(n):
        argv = ["unshare", "--time", "--monotonic", str((i + 1) * SHIFT_S), sys.executable, "-m", "bench", "host"]
        argv += ["--serve", "--controller", f"127.0.0.1:{port}", "--host", f"h{i}", "--deadline-s", "240"]
        with open(logs / f"agent-h{i}.out", "wb") as out:
            agents.append(subprocess.Popen(argv, stdout=out, stderr=out, env=env, start_new_session=True))
    return agents


def agent_processes(within_s: float = 15.0) -> list[int]:
    """Live processes that a serving agent marked as its own, once its guard (which
    sweeps them when the agent exits, a moment after it) has had ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        left = [pid for pid, run in marked().items() if run.startswith("agent-h") and alive(pid)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


@pytest.mark.timeout(240)
def test_a_run_on_agents_the_cluster_started(run_scenario, tmp_path: Path) -> None:
    port = free_port()
    agents = start_agents(port, 2, tmp_path)
    try:
        report = run_scenario(SCENARIO, cluster=Cluster("127.0.0.1", port, secret=SECRET, wait_s=60))
        codes = [a.wait(timeout=30) for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
                a.wait()
    logs = [(tmp_path / f"agent-h{i}.out").read_text() for i in range(2)]
    assert codes == [0, 0], logs
    assert all("the run is over after 2 trial(s)" in log for log in logs), logs
    assert report.status == "complete"
    trials = rows(report)
    assert [(r["fault"], r["outcome"]) for r in trials] == [("host-down", "recovered"), ("kill", "recovered")], trials
    for r in trials:  # a wrong alignment gives -1000 s or +1000 s
        assert 0 < r["ttd_s"] < 5, r
        assert 0 <= r["ttd_err_s"] < 0.01, r
    info = report.rundir.read_run_json()
    assert sorted(info["cluster"]) == ["h0", "h1"]
    clocks = [trial for point in info["host_clocks"].values() for trial in point.values()]
    assert len(clocks) == 2
    for trial in clocks:
        for h, clock in trial.items():
            truth = -(int(h[1:]) + 1) * SHIFT_S * 10**9  # known to the test only
            assert abs(clock["offset_ns"] - truth) <= clock["err_ns"], (h, clock)
            assert "monotonic_shift_ns" not in clock, "the harness cannot know a real host's clock"
    assert agent_processes() == [], "every agent swept what its trials left"


@pytest.mark.timeout(60)
def test_agents_that_never_join_are_one_clear_error(tmp_path: Path) -> None:
    scenario = tmp_path / "cluster.toml"
    scenario.write_text(SCENARIO)
    port = free_port()
    args = ["run", str(scenario), "--out", str(tmp_path), "--agents-at", f"127.0.0.1:{port}", "--agents-wait-s", "1"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("ftbench: error")]
    assert "host agents h0, h1 did not join" in line and "joined: none" in line
    (run_json,) = tmp_path.glob("cluster/*/run.json")
    assert json.loads(run_json.read_text())["status"] == "interrupted"


@pytest.mark.timeout(60)
def test_an_agent_without_the_runs_secret_is_refused(tmp_path: Path) -> None:
    scenario = tmp_path / "cluster.toml"
    scenario.write_text(ONE_TRIAL.replace("world_size = 4", "world_size = 2").replace("host = 1", "ranks = [1]"))
    port = free_port()
    agents = start_agents(port, 1, tmp_path, secret="not-the-runs-secret-at-all-42")
    try:
        args = [
            "run",
            str(scenario),
            "--out",
            str(tmp_path),
            "--agents-at",
            f"127.0.0.1:{port}",
            "--agents-wait-s",
            "5",
        ]
        result = CliRunner().invoke(cli, args, env={SECRET_ENV: SECRET})
    finally:
        for a in agents:
            a.kill()
            a.wait()
    assert result.exit_code == 1, result.output
    assert "refused hello/h0: hello/h0: the MAC does not match" in result.output
    assert "host agents h0 did not join" in result.output


def test_a_run_across_hosts_without_a_secret_is_refused() -> None:
    env = {k: v for k, v in os.environ.items() if k not in (SECRET_ENV, "FTBENCH_SECRET_FILE")}
    address = _routable_address()
    for args in (
        ["run", "kill-one-rank", "--agents-at", f"{address}:29611"],
        ["host", "--serve", "--controller", f"{address}:29611", "--host", "h0"],
    ):
        result = CliRunner().invoke(cli, args, env=env)
        assert result.exit_code == 2, result.output
        assert "is reachable from other hosts: set $FTBENCH_SECRET_FILE" in result.output


def _routable_address() -> str:
    """An address of this machine that is not loopback (the one a default route uses)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("198.18.0.1", 9))  # benchmarking range: no packet is sent
        except OSError:
            pytest.skip("this machine has no route off loopback")
        return str(s.getsockname()[0])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run", "kill-one-rank", "--agents-at", "0.0.0.0:29600"], "not a wildcard"),
        (["run", "kill-one-rank", "--agents-at", "127.0.0.1"], "ADDR:PORT"),
        (["run", "kill-one-rank", "--agents-at", "127.0.0.1:1", "--env", "torch==2.13.0"], "cannot be combined"),
        (["host", "--serve", "--controller", "127.0.0.1:1", "--host", "node7"], "expected h0, h1"),
        (["host", "--controller", "127.0.0.1:1", "--host", "h0"], "--events-dir"),
    ],
)
def test_cluster_options_are_checked_before_anything_runs(args: list[str], says: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 2, result.output
    assert says in result.output


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_killed_harness_leaves_serving_agents_nothing_to_do(tmp_path: Path) -> None:
    """SIGKILL of the harness mid-trial: each agent's store calls fail, it kills what the
    trial started on its host and exits 3; nothing of the run is left anywhere."""
    import signal

    scenario = tmp_path / "cluster.toml"
    scenario.write_text(SCENARIO.replace("steps = 120", "steps = 3000").replace("at_step = 40", "at_step = 2900"))
    port = free_port()
    agents = start_agents(port, 2, tmp_path)
    env = {k: v for k, v in os.environ.items() if k != MARKER} | {SECRET_ENV: SECRET}
    argv = [sys.executable, "-m", "bench", "run", str(scenario), "--out", str(tmp_path / "results")]
    harness = subprocess.Popen([*argv, "--agents-at", f"127.0.0.1:{port}"], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not any(
            '"step_end"' in p.read_text() for p in tmp_path.glob("results/cluster/*/events/*/*/rank*-*.jsonl")
        ):
            time.sleep(0.2)
        assert agent_processes(), "the trial did not start training on the agents in time"
        harness.send_signal(signal.SIGKILL)
        harness.wait(timeout=30)
        codes = [a.wait(timeout=60) for a in agents]
    finally:
        for p in (harness, *agents):
            if p.poll() is None:
                p.kill()
                p.wait()
    logs = [(tmp_path / f"agent-h{i}.out").read_text() for i in range(2)]
    assert codes == [3, 3], logs
    assert all("the harness went away" in log for log in logs), logs
    assert agent_processes() == []
