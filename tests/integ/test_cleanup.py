"""No orphans: SIGKILL of the harness itself leaves no process of its run behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.procs.hygiene import alive, marked_pids
from tests.integ.conftest import run_of

pytestmark = pytest.mark.integ

LONG = """
name = "long"
[workload]
kind = "ddp"
world_size = 4
steps = 100000
pg_timeout_s = 10
[[faults]]
kind = "stall"
duration_s = 30
target = { ranks = [1] }
trigger = { at_step = 20 }
[measure]
trials = 1
deadline_s = 120
"""


PARTITIONED = LONG.replace('kind = "stall"', 'kind = "partition"')


def network_leftovers() -> list[str]:
    """ftbench's namespaces, root links, firewall rules and qdiscs still present."""
    found = []
    for argv in (["ip", "netns", "list"], ["ip", "-o", "link", "show"], ["iptables-save"], ["tc", "qdisc", "show"]):
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
        found += [f"{argv[0]}: {line.strip()}" for line in out.splitlines() if "ftb" in line]
    return found


@pytest.mark.timeout(120)
def test_sigkill_of_the_harness_mid_trial_leaves_nothing(tmp_path: Path, write_scenario) -> None:
    kill_harness_mid_fault(tmp_path, write_scenario(LONG))


@pytest.mark.root
@pytest.mark.alone  # every ftb namespace, link and rule on the machine must be gone
@pytest.mark.timeout(120)
def test_sigkill_of_the_harness_during_a_partition_leaves_no_network_state(tmp_path: Path, write_scenario) -> None:
    from injectors.link import system

    reason = system.available()
    if reason:
        pytest.skip(f"link faults need network namespaces: {reason}")
    kill_harness_mid_fault(tmp_path, write_scenario(PARTITIONED))
    deadline = time.monotonic() + 30
    while network_leftovers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not network_leftovers(), "the guard should have reverted the partition and the topology"


def kill_harness_mid_fault(tmp_path: Path, scenario: Path) -> None:
    """Start a run, SIGKILL its harness while the fault is active, expect no process left."""
    harness = subprocess.Popen(
        [sys.executable, "-m", "bench", "run", str(scenario), "--out", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            stalled = list(tmp_path.rglob("harness.jsonl"))
            if stalled and '"inject"' in stalled[0].read_text():
                break  # ranks running, one of them stopped by SIGSTOP: the worst moment to die
            time.sleep(0.2)
        else:
            pytest.fail("the trial did not reach its injection in time")
        run = run_of(harness)
        assert run is not None, "the harness should have a guard"
        run_pids = set(marked_pids(run))
        assert len(run_pids) >= 6, "expected guard, forkserver, store and four ranks"
        if "partition" in scenario.read_text():
            assert network_leftovers(), "the partition should be in place while the harness dies"
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait(timeout=10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(alive(p) for p in run_pids):
            time.sleep(0.1)
        assert not [p for p in run_pids if alive(p)], "processes outlived the harness"
    finally:
        if harness.poll() is None:
            harness.kill()


SHORT = """
name = "short"
[workload]
kind = "ddp"
world_size = 2
steps = 400
pg_timeout_s = 10
[[faults]]
kind = "kill"
target = { ranks = [1] }
trigger = { at_step = 20 }
[measure]
trials = 3
deadline_s = 60
# Forked ranks: this test is about what an interrupted run keeps, not how ranks start.
[launch]
start_method = "forkserver"
[sweep]
"recovery.strategy" = ["failstop", "reinit"]
"""


@pytest.mark.timeout(150)
def test_interrupt_keeps_finished_trials_and_resume_completes_the_run(tmp_path: Path, write_scenario) -> None:
    scenario = write_scenario(SHORT)
    harness = subprocess.Popen(
        [sys.executable, "-m", "bench", "run", str(scenario), "--out", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    rows: list[Path] = []
    run = None
    while time.monotonic() < deadline and not rows:
        run = run or run_of(harness)
        rows = [p for p in tmp_path.rglob("trials.jsonl") if p.read_text().count("\n") >= 2]
        time.sleep(0.1)
    assert run is not None, "the harness should have a guard"
    assert rows, "two trials should have finished"
    harness.send_signal(signal.SIGINT)
    _, err = harness.communicate(timeout=60)
    assert harness.returncode == 130, err
    assert "--resume" in err
    run_dir = rows[0].parent
    kept = run_dir.joinpath("trials.jsonl").read_text().count("\n")
    assert 2 <= kept < 6
    assert '"status": "interrupted"' in run_dir.joinpath("run.json").read_text()
    assert not marked_pids(run), "an interrupted run leaves no process"

    done = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--resume", str(run_dir)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = run_dir.joinpath("trials.jsonl").read_text().splitlines()
    assert len(lines) == 6, "resume runs exactly the trials that were missing"
    assert '"status": "complete"' in run_dir.joinpath("run.json").read_text()


FORKER = """
import os, time
while True:  # a parent that keeps forking, as an agent restarting its workers does
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    time.sleep(0.001)
"""


@pytest.mark.timeout(60)
def test_sweep_catches_children_forked_while_it_sweeps() -> None:
    from bench.procs.hygiene import MARKER, marked_pids, sweep

    run_id = f"sweeptest{os.getpid()}"
    parent = subprocess.Popen([sys.executable, "-c", FORKER], env={**os.environ, MARKER: run_id})
    try:
        deadline = time.monotonic() + 20
        while len(marked_pids(run_id)) < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sweep(run_id) == []
        assert marked_pids(run_id) == [], "a child forked during the sweep outlived it"
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.timeout(60)
def test_a_host_made_inside_another_hands_the_outer_run_its_marker_back() -> None:
    """A CLI run or a calibration inside a test session makes a second host in the same
    process: once it is closed, what the outer run starts must still carry the outer
    run's marker, or neither its guard nor its sweeps would ever see it."""
    from bench.procs.hygiene import MARKER, marked_pids
    from bench.procs.launcher import ProcessHost

    before = os.environ.get(MARKER)  # the test session's own host, where one is up
    with ProcessHost() as outer:
        with ProcessHost() as inner:
            assert os.environ[MARKER] == inner.run_id
        assert os.environ[MARKER] == outer.run_id
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert child.pid in marked_pids(outer.run_id)
        finally:
            child.kill()
            child.wait()
    assert os.environ.get(MARKER) == before


@pytest.mark.root
@pytest.mark.timeout(60)
def test_cleanup_from_another_state_directory_leaves_a_live_runs_network_alone(tmp_path: Path) -> None:
    """``ftbench cleanup`` whose claims live elsewhere (``FTBENCH_STATE_DIR``) must still
    see, by its guard, that a run is live: it once removed the private network a live
    torchrun trial ran in, killing the agent and its workers mid-trial."""
    from bench.procs.launcher import ProcessHost
    from injectors.link import netns, system

    reason = system.available()
    if reason:
        pytest.skip(f"network namespaces: {reason}")
    with ProcessHost() as host:
        net = netns.PrivateNet.create(system.tag_for(host.run_id))
        try:
            done = subprocess.run(
                [sys.executable, "-m", "bench", "cleanup"],
                capture_output=True,
                text=True,
                timeout=50,
                env=dict(os.environ, FTBENCH_STATE_DIR=str(tmp_path / "state")),
            )
            assert done.returncode == 0, done.stderr
            assert net.namespace in system.namespaces(), f"a live run's network was removed: {done.stdout}"
        finally:
            net.destroy()
