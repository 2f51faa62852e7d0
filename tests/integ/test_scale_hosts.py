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
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.hosts.auth import SECRET_ENV
from bench.hosts.cluster import Cluster
from bench.procs.hygiene import MARKER, marked_pids
from bench.scale import rundir, spec, sweep
from bench.scale.coordinators import COORDINATORS
from injectors.link import netns, system
from tests.integ.test_cluster import agent_processes

pytestmark = [
    pytest.mark.integ,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None, reason="network and time namespaces need root"
    ),
]

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


@pytest.mark.timeout(420)
def test_scale_across_two_namespaced_hosts(tmp_path: Path) -> None:
    reason = system.available()
    if reason:
        pytest.skip(reason)
    topo = netns.Topology.create(system.tag_for(f"scale-{uuid.uuid4().hex[:8]}"), 2)
    head = topo.root_address
    agents: list[subprocess.Popen[bytes]] = []
    head_sockets: list[tuple[str, int]] = []
    host_sockets: list[tuple[str, int]] = []
    connected_from: set[str] = set()

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
        for h in topo.hosts:
            host_sockets.extend(listening(set(_agent_marked()), h.namespace))

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
        topo.destroy()
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
    assert agent_processes() == [], "processes of the hosts outlived the run"
    assert not [n for n in system.namespaces() if topo.tag in n]


def _agent_marked() -> dict[int, str]:
    from bench.procs.hygiene import marked

    return {pid: run for pid, run in marked().items() if run.startswith("agent-h")}
