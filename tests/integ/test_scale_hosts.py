"""``ftbench scale --agents-at`` across two hosts that are network namespaces on a bridge
(the link faults' topology) AND time namespaces whose CLOCK_MONOTONIC runs 1000 s and
2000 s ahead of the harness's: the coordinator on the head (the root namespace) listens
on the bridge address only, the participants are the hosts' own processes, started by
``ftbench host --serve`` agents started as ssh would start them (not children of the run).

A wrong clock mapping would show as latencies off by 1000 s; participants on one host
only would show as the coordinator's connections coming from one address.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.hosts.auth import SECRET_ENV
from bench.hosts.cluster import Cluster
from bench.procs.hygiene import MARKER, marked_pids
from bench.scale import rundir, spec, sweep
from bench.scale.coordinators import COORDINATORS
from injectors.link import netns, system

pytestmark = pytest.mark.integ

SHIFT_S = 1000
SECRET = "scale-across-hosts-only-the-test-knows-0123456789"
CHOSEN = ("tcpstore-libuv", "lighthouse", "membership")
SIZES = (8, 16)
SETTINGS = (
    f"coordinators={list(CHOSEN)}",
    f"sizes={list(SIZES)}",
    "repeats=1",
    "deadline_s=60",
    "lh_heartbeat_ms=200",
    "lh_heartbeat_timeout_ms=1000",
)


def listening(pids: set[int], namespace: str = "") -> list[tuple[str, int]]:
    """(address, pid) of every TCP or UDP socket the given processes listen on, in
    ``namespace`` (the root one by default)."""
    argv = ["ss", "-ltunpH"]
    if namespace:
        argv = ["ip", "netns", "exec", namespace, *argv]
    out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30).stdout
    found = []
    for line in out.splitlines():
        for pid in (int(p) for p in re.findall(r"pid=(\d+)", line)):
            if pid in pids:
                found.append((line.split()[4], pid))
    return found


def peers(local: str) -> set[str]:
    """The remote addresses of every established TCP connection to ``local`` (ADDR:PORT)."""
    out = subprocess.run(["ss", "-tnH", "state", "established"], capture_output=True, text=True, timeout=30).stdout
    found = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == local:
            found.add(fields[3].rsplit(":", 1)[0])
    return found


def free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def start_agents(topo: netns.Topology, port: int, logs: Path) -> list[subprocess.Popen[bytes]]:
    """``ftbench host --serve`` in each host's network namespace and a time namespace of
    its own, as ssh would start it (no run marker, a session of its own)."""
    env = {k: v for k, v in os.environ.items() if k != MARKER} | {SECRET_ENV: SECRET}
    agents = []
    for i, h in enumerate(topo.hosts):
        argv = ["unshare", "--time", "--monotonic", str((i + 1) * SHIFT_S), "ip", "netns", "exec", h.namespace]
        argv += [sys.executable, "-m", "bench", "host", "--serve", "--controller", f"{topo.root_address}:{port}"]
        argv += ["--host", h.name, "--deadline-s", "300"]
        with open(logs / f"agent-{h.name}.out", "wb") as out:
            agents.append(subprocess.Popen(argv, stdout=out, stderr=out, env=env, start_new_session=True))
    return agents


@pytest.fixture
def topo() -> Iterator[netns.Topology]:
    """Two hosts on a bridge, the harness in the root namespace; removed after the test."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("network and time namespaces need root")
    reason = system.available()
    if reason:
        pytest.skip(reason)
    topology = netns.Topology.create(system.tag_for(f"scale-{uuid.uuid4().hex[:8]}"), 2)
    try:
        yield topology
    finally:
        topology.destroy()
    assert not [n for n in system.namespaces() if topology.tag in n]


@pytest.mark.timeout(420)
@pytest.mark.root
def test_scale_across_two_namespaced_hosts(topo: netns.Topology, tmp_path: Path) -> None:
    head = topo.root_address
    agents: list[subprocess.Popen[bytes]] = []
    head_sockets: list[tuple[str, int]] = []
    host_sockets: list[tuple[str, int]] = []
    connected_from: set[str] = set()
    seen_on_hosts: set[int] = set()

    def progress(line: str) -> None:
        # Called after each operation, while the coordinator and the participants live.
        run_id = os.environ.get(MARKER, "")
        if not run_id or " rep " not in line:
            return
        found = listening({*marked_pids(run_id), os.getpid()})  # the run store is this process's
        head_sockets.extend(found)
        for local, pid in found:
            if pid != os.getpid():  # a coordinator's: who is connected to it
                connected_from.update(peers(local))
        on_hosts = set(_agent_marked())
        seen_on_hosts.update(on_hosts)
        for h in topo.hosts:
            host_sockets.extend(listening(on_hosts, h.namespace))

    try:
        port = free_port(head)
        agents = start_agents(topo, port, tmp_path)
        started = time.monotonic()
        path = sweep.run(
            spec.build(SETTINGS),
            tmp_path,
            progress=progress,
            cluster=Cluster(head, port, secret=SECRET, wait_s=120),
            hosts=2,
        )
        took = time.monotonic() - started
        codes = [a.wait(timeout=60) for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
                a.wait()
    logs = {h.name: (tmp_path / f"agent-{h.name}.out").read_text() for h in topo.hosts}
    print(f"the sweep took {took:.1f} s")
    assert codes == [0, 0], logs
    assert all("the run is over after 1 trial(s)" in log for log in logs.values()), logs

    run = rundir.load(path)
    info = run.info
    assert info["finished"] and info["stops"] == [] and not info["skipped"], info
    print(run.records.to_string())
    done = run.ok()
    for name in CHOSEN:
        for op in COORDINATORS[name].ops:
            for n in SIZES:
                rows = done[(done["coordinator"] == name) & (done["op"] == op.name) & (done["n"] == n)]
                assert len(rows) == 1, f"{name} / {op.name} at {n}: {run.records}"
                row = rows.iloc[0]
                assert row["done"] == n - (1 if op.victim else 0)
                assert row["hosts"] == 2 and row["workers"] >= 2, row
                # A wrong mapping of the hosts' clocks gives about +-1000 s.
                assert 0 < row["p50_s"] <= row["p95_s"] <= row["all_s"] < 60, row
                assert 0 < row["clock_err_s"] < 0.05, "a round trip on one machine takes well under 100 ms"

    # Participants on both hosts: the coordinators' connections came from both addresses.
    assert {h.address for h in topo.hosts} <= connected_from, connected_from
    # Nothing listens beyond the named address: on the head the run store and the
    # coordinators on it only (or loopback); on the hosts nothing but loopback.
    assert head_sockets, "no listening socket was seen while the coordinators ran"
    assert {a for a, pid in head_sockets if pid != os.getpid()} and all(
        a.startswith(f"{head}:") for a, pid in head_sockets if pid != os.getpid()
    ), f"the coordinators listen on {head} only: {head_sockets}"
    beyond = [s for s in head_sockets if s[0].rsplit(":", 1)[0] not in (head, "127.0.0.1", "[::1]")]
    assert beyond == [], beyond
    assert [s for s in host_sockets if not s[0].startswith(("127.0.0.1", "[::1]"))] == [], host_sockets

    # Each host's clock: the truth is known only here; every estimate within its error.
    hosts = info["hosts"]
    assert sorted(hosts) == ["h0", "h1"]
    assert {hosts[h]["address"] for h in hosts} == {h.address for h in topo.hosts}
    for h in topo.hosts:  # the run directory is on a file system the hosts share here
        assert hosts[h.name]["logs"] == str(path / "logs" / h.name)
        assert list((path / "logs" / h.name).glob("worker-*.log")), f"no process of participants ran on {h.name}"
    estimates = [json.loads(line) for line in (path / "logs" / "clocks.jsonl").read_text().splitlines()]
    assert len(estimates) == 2 * len(CHOSEN) * len(SIZES)
    for e in estimates:
        truth = -(int(e["host"][1:]) + 1) * SHIFT_S * 10**9
        for phase in ("start", "end"):
            assert abs(e[phase]["offset_ns"] - truth) <= e[phase]["err_ns"], e
    for h, record in hosts.items():
        truth = -(int(h[1:]) + 1) * SHIFT_S * 10**9
        assert abs(record["clock"]["offset_ns"] - truth) <= record["clock"]["err_ns_max"], record
    assert info["clock"]["across_hosts"]

    # Nothing is left on either host, nor on the head.
    assert marked_pids(info["run_id"]) == [], "processes of the head outlived the run"
    assert seen_on_hosts, "no process of the hosts' agents was seen while the coordinators ran"
    assert left_on_hosts(info) == [], "processes of the hosts outlived the run"


LONG = ("coordinators=['tcpstore-libuv', 'membership']", "sizes=[8, 16, 32, 64, 128]", "repeats=2")
"""A sweep still running when the test takes a host or the harness away."""


def _harness(topo: netns.Topology, port: int, out: Path) -> subprocess.Popen[bytes]:
    """``ftbench scale --agents-at`` as a user runs it, its output kept."""
    env = {k: v for k, v in os.environ.items() if k != MARKER} | {SECRET_ENV: SECRET}
    argv = [sys.executable, "-m", "bench", "scale", "--out", str(out), "--hosts", "2"]
    argv += ["--agents-at", f"{topo.root_address}:{port}", *(a for s in LONG for a in ("--set", s))]
    with open(out / "harness.out", "wb") as log:
        return subprocess.Popen(argv, stdout=log, stderr=log, env=env, start_new_session=True)


def _measuring(out: Path, harness: subprocess.Popen[bytes], timeout_s: float = 180) -> dict[str, Any]:
    """scale.json of the harness's run once a point is measured on the hosts."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert harness.poll() is None, (out / "harness.out").read_text()
        for points in (out / "scale").glob("*/points.csv"):
            info: dict[str, Any] = json.loads((points.parent / rundir.INFO).read_text())
            if "hosts" in info:
                return info
        time.sleep(0.2)
    raise AssertionError("no point measured across the hosts in time")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.root
def test_a_host_lost_mid_sweep_ends_the_run_and_leaves_nothing(topo: netns.Topology, tmp_path: Path) -> None:
    """SIGKILL of h1's agent mid-sweep (its processes of participants die with it): the
    harness finds the host lost (its beat stops), ends with one line saying so, and h0's
    agent ends its session and exits; nothing of the run is left on either host."""
    port = free_port(topo.root_address)
    agents = start_agents(topo, port, tmp_path)
    harness = _harness(topo, port, tmp_path)
    try:
        info = _measuring(tmp_path, harness)
        os.kill(int(info["hosts"]["h1"]["agent_pid"]), signal.SIGKILL)
        code = harness.wait(timeout=120)
        codes = [a.wait(timeout=60) for a in agents]
    finally:
        for p in (harness, *agents):
            if p.poll() is None:
                p.kill()
                p.wait()
    out = (tmp_path / "harness.out").read_text()
    assert code == 1, out
    assert "ftbench: error: host h1" in out and "lost" in out, out
    assert codes[0] == 0 and codes[1] != 0, codes
    (run,) = (tmp_path / "scale").glob("*/scale.json")
    final = json.loads(run.read_text())
    assert not final["finished"] and "h1" in final["error"], final.get("error")
    assert marked_pids(final["run_id"]) == []
    assert left_on_hosts(final) == [], "a process of participants outlived its host's agent"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.root
def test_a_killed_harness_ends_every_hosts_session(topo: netns.Topology, tmp_path: Path) -> None:
    """SIGKILL of the harness mid-sweep: its run store goes with it, each host's agent
    ends its session (its processes of participants killed) and exits 3; the head's guard
    sweeps the coordinators; nothing is left anywhere."""
    port = free_port(topo.root_address)
    agents = start_agents(topo, port, tmp_path)
    harness = _harness(topo, port, tmp_path)
    try:
        info = _measuring(tmp_path, harness)
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
    deadline = time.monotonic() + 30
    while marked_pids(info["run_id"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marked_pids(info["run_id"]) == [], "the guard did not sweep the head's processes"
    assert left_on_hosts(info) == []


def _agent_marked(info: dict[str, Any] | None = None) -> dict[int, str]:
    """Live processes a serving agent marked as its own: of this run's agents (scale.json
    names them), or before it says, of any agent on the hosts' namespaces."""
    from bench.procs.hygiene import alive, marked

    ours = {f"agent-{h}-{d['agent_pid']}" for h, d in (info or {}).get("hosts", {}).items()}
    return {
        pid: run for pid, run in marked().items() if (run in ours if ours else run.startswith("agent-h")) and alive(pid)
    }


def left_on_hosts(info: dict[str, Any], within_s: float = 15.0) -> list[int]:
    """This run's processes on the hosts still alive after ``within_s`` (other tests'
    agents may run meanwhile: only this run's agents' markers count)."""
    deadline = time.monotonic() + within_s
    while (left := sorted(_agent_marked(info))) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--hosts", "2"], "--hosts goes with --agents-at"),
        (["--agents-at", "0.0.0.0:29600", "--hosts", "2"], "not a wildcard"),
        (["--agents-at", "127.0.0.1", "--hosts", "2"], "ADDR:PORT"),
        (["--agents-at", "127.0.0.1:29600"], "give --hosts N"),
        (["--agents-at", "127.0.0.1:29600", "--hosts", "2", "--set", "server_family='v4-mapped'"], "loopback socket"),
    ],
)
def test_scale_across_hosts_checks_its_options_before_anything_runs(args: list[str], says: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from bench.cli import cli

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    result = CliRunner().invoke(cli, ["scale", "--out", str(tmp_path), *args], env=env)
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert not (tmp_path / "scale").exists(), "nothing may run before the options are checked"


def test_scale_across_hosts_refuses_a_routable_address_without_a_secret(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from bench.cli import cli

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("198.18.0.1", 9))  # benchmarking range: no packet is sent
        except OSError:
            pytest.skip("this machine has no route off loopback")
        address = s.getsockname()[0]
    env = {k: v for k, v in os.environ.items() if k not in (SECRET_ENV, "FTBENCH_SECRET_FILE")}
    args = ["scale", "--out", str(tmp_path), "--agents-at", f"{address}:29611", "--hosts", "2"]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 2, result.output
    assert "is reachable from other hosts: set $FTBENCH_SECRET_FILE" in result.output


@pytest.mark.timeout(120)
def test_agents_that_never_join_a_scale_run_are_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from bench.cli import cli

    port = free_port("127.0.0.1")
    args = ["scale", "--out", str(tmp_path), "--agents-at", f"127.0.0.1:{port}", "--hosts", "2"]
    result = CliRunner().invoke(cli, [*args, "--agents-wait-s", "1", "--set", "sizes=[8]"])
    assert result.exit_code == 1, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("ftbench: error")]
    assert "host agents h0, h1 did not join" in line and "joined: none" in line
    (info,) = (tmp_path / "scale").glob("*/scale.json")
    recorded = json.loads(info.read_text())
    assert not recorded["finished"] and "did not join" in recorded["error"]
    assert marked_pids(recorded["run_id"]) == []
