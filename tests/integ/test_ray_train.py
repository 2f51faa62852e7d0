"""ray-train for real: Ray nodes in host namespaces, Ray Train's own recovery, teardown.

The default set starts the smallest cluster that shows the capability (a head and a
worker node, each in a namespace of its own with a private /tmp) and checks that Ray
listens only inside the namespaces and leaves nothing behind. The slow set runs Ray
Train's TorchTrainer through a worker kill and a node loss, and SIGKILLs a harness in
the middle of a trial. Skipped, with the reason, without root or without Ray.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.procs.hygiene import alive, kill_all, marked_pids
from bench.procs.launcher import ProcessHost
from bench.strategies.ray_train.cluster import GCS_PORT, HEAD_PORTS, PORTS, Node, await_port
from injectors.link import netns, system
from tests.integ.conftest import rows, run_of

pytestmark = [pytest.mark.integ, pytest.mark.root]

RAY_PORTS = {*PORTS.values(), *HEAD_PORTS.values()} - {PORTS["min-worker-port"], PORTS["max-worker-port"]}


def _need_ray_and_namespaces() -> None:
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed here: pip install 'ftbench[ray]'")
    why = system.available()
    if why:
        pytest.skip(f"Ray nodes live in host namespaces: {why}")


def _listening(namespace: str = "") -> set[int]:
    """TCP ports in LISTEN state in a network namespace ("": the machine's own)."""

    def read() -> set[int]:
        ports = set()
        for name in ("/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"):
            for line in Path(name).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        return ports

    return netns.run_in(namespace, read) if namespace else read()


def _session_dirs() -> list[Path]:
    return [p for p in Path("/tmp").glob("ray*") if p.is_dir()]


@pytest.mark.timeout(150)
def test_two_ray_nodes_listen_only_in_their_namespaces_and_leave_nothing() -> None:
    """``ray start --head`` in h0 and ``ray start --address`` in h1: every port Ray opens
    is inside the hosts' namespaces (none on the machine's own interfaces), the nodes'
    sessions are in their private /tmp, and killing the nodes leaves no process, no
    namespace and no /tmp/ray."""
    _need_ray_and_namespaces()
    before = set(_session_dirs())
    run = f"ray-test-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, FTBENCH_RUN=run, OMP_NUM_THREADS="1")
    topo = netns.Topology.create(system.tag_for(run), 2)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        nodes = [Node(i, h.namespace, h.address, 1) for i, h in enumerate(topo.hosts)]
        head = nodes[0]
        procs.append(
            subprocess.Popen(head.command(head.address), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        await_port(head.address, GCS_PORT, "the head's GCS", procs, 100)
        procs.append(
            subprocess.Popen(
                nodes[1].command(head.address), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
        for node in nodes:
            await_port(node.address, PORTS["node-manager-port"], f"h{node.index}'s raylet", procs, 100)
        inside = _listening(head.namespace)
        assert {GCS_PORT, PORTS["node-manager-port"], PORTS["object-manager-port"]} <= inside
        assert PORTS["node-manager-port"] in _listening(nodes[1].namespace)
        assert not (RAY_PORTS & _listening()), "a Ray server listens on the machine's own interfaces"
        assert set(_session_dirs()) == before, "a Ray session appeared in the machine's /tmp"
        pids = marked_pids(run)
        assert len(pids) >= 4, "expected each node's ray start, the GCS and two raylets"
    finally:
        assert not kill_all(marked_pids(run)), "a Ray process outlived SIGKILL"
        for p in procs:
            p.wait(timeout=30)
        topo.destroy()
    assert not marked_pids(run)
    assert set(_session_dirs()) == before, "a Ray session was left in /tmp"
    assert not [n for n in system.namespaces() if topo.tag in n]


# A fast controller poll and start timeout keep the test short; the GCS's node health
# checks stay Ray's own: tuned to 0.5 s, a machine loaded by other work had the GCS
# declare a live node dead before the fault (docs/ray.md).
SCENARIO = """
name = "ray-small"
[workload]
kind = "ddp"
world_size = 4
steps = 240
pg_timeout_s = 5
[launch]
ranks_per_host = 2
[[faults]]
kind = "kill"
target = { ranks = [2] }
trigger = { at_step = 170 }
[recovery]
strategy = "ray-train"
[recovery.ray-train]
min_workers = 2
checkpoint_every = 50
health_check_interval_s = 0.2
worker_group_start_timeout_s = 5.0
[measure]
trials = 1
deadline_s = 280
reference = true
[sweep]
"faults.0" = [
    { kind = "kill", target = { ranks = [2] }, trigger = { at_step = 170 } },
    { kind = "host-down", target = { host = 1 }, trigger = { at_step = 170 } },
]
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ray_train_recovers_from_a_worker_kill_and_a_node_loss(run_scenario, host: ProcessHost) -> None:
    """A worker killed, then (its own point) node h1 lost with its raylet and workers:
    Ray's controller restarts the group (on h0 alone after the node loss, elastic), the
    phases add up to the downtime, the model ends where the fault-free run's does, Ray
    blames no one but the victims, and nothing of Ray is left."""
    _need_ray_and_namespaces()
    before = set(_session_dirs())
    report = run_scenario(SCENARIO)
    got = rows(report)
    assert [r["fault"] for r in got] == ["kill", "host-down"]
    for r in got:
        assert r["outcome"] == "recovered", r["error"]
        phases = sum(float(v) for k, v in r.items() if k.startswith("phase_") and v == v and v is not None)
        assert phases == pytest.approx(float(r["downtime_s"]), abs=1e-6)
        assert float(r["phase_controller_s"]) > 0
        assert abs(float(r["loss_delta"])) < 1e-3
        # Ray names the workers whose actor it lost; after a node loss a 0.2 s poll may
        # first see only the survivors' errors and name no one (docs/ray.md): never a
        # wrong worker.
        assert r["blame_correct"] == 1 if r["fault"] == "kill" else r["blame_correct"] in (None, 1)
    assert set(_session_dirs()) == before


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_sigkilled_harness_leaves_no_ray_process_namespace_or_session(tmp_path: Path, write_scenario) -> None:
    """SIGKILL the harness while Ray trains: the guard sweeps every Ray process (they all
    carry the run's marker, inherited from ``ray start``), the undo record removes the
    hosts' namespaces, and the nodes' private /tmp goes with their processes."""
    _need_ray_and_namespaces()
    before = set(_session_dirs())
    harness = subprocess.Popen(
        [sys.executable, "-m", "bench", "run", str(write_scenario(SCENARIO)), "--out", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any(tmp_path.rglob("controller-*.jsonl")):
            time.sleep(0.5)
        assert any(tmp_path.rglob("controller-*.jsonl")), "Ray's controller did not start in time"
        run = run_of(harness)
        assert run is not None
        pids = set(marked_pids(run))
        tag = system.tag_for(run)
        assert [n for n in system.namespaces() if tag in n], "the hosts' namespaces should exist"
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait(timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            any(alive(p) for p in pids) or any(tag in n for n in system.namespaces())
        ):
            time.sleep(0.5)
        assert not [p for p in pids if alive(p)], "Ray processes outlived the harness"
        assert not [n for n in system.namespaces() if tag in n], "namespaces outlived the harness"
        assert set(_session_dirs()) == before
        out = subprocess.run([sys.executable, "-m", "bench", "cleanup"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and run not in out.stdout, out.stdout
    finally:
        if harness.poll() is None:
            harness.kill()
