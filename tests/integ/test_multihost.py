"""Beyond one machine, on one machine: hosts that are network namespaces AND time
namespaces whose CLOCK_MONOTONIC differs from the harness's by a known offset, so that a
wrong clock alignment shows as a wrong figure (docs/multihost.md)."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.hosts.agent import enqueue, key, send
from bench.hosts.auth import Sealer
from bench.hosts.clock import Offset, Responder
from bench.hosts.launcher import AgentLauncher
from bench.procs.events import read_events
from bench.procs.hygiene import alive, marked_pids
from bench.procs.launcher import ProcessHost
from bench.procs.store import bound_store
from tests.integ.conftest import rows, run_of

pytestmark = pytest.mark.integ

SHIFT_S = 1000
SECRET = "only-the-test-knows-this-0123456789"


def _need_time_namespaces() -> None:
    if os.geteuid() != 0:
        pytest.skip("time namespaces need root (unshare --time)")
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")


PINGER = """
import datetime, json, sys
import torch.distributed as dist
from bench.hosts.auth import Sealer
from bench.hosts.clock import StorePinger
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), None, False, timeout=datetime.timedelta(seconds=20))
pinger = StorePinger(store, "clock/h9", Sealer(sys.argv[2], "test"))
est = pinger.measure()
pinger.bye()
print(json.dumps(est.as_dict()))
"""


@pytest.mark.timeout(60)
def test_offset_of_a_time_namespace_is_found_within_its_error() -> None:
    """The true offset is exactly -1000 s (the namespace's monotonic clock runs 1000 s
    ahead); the estimate must lie within its own stated uncertainty of it."""
    _need_time_namespaces()
    server = bound_store("127.0.0.1", timeout_s=30)
    responder = Responder(lambda: dist_client(server.port), "clock/h9", Sealer(SECRET, "test")).start()
    try:
        out = subprocess.run(
            ["unshare", "--time", "--monotonic", str(SHIFT_S), sys.executable, "-c", PINGER, str(server.port), SECRET],
            capture_output=True,
            text=True,
            timeout=45,
            check=True,
        )
    finally:
        responder.stop()
    est = Offset.from_dict(json.loads(out.stdout.strip().splitlines()[-1]))
    truth = -SHIFT_S * 10**9
    print(f"estimated {est.offset_ns} ns, truth {truth} ns, error {est.offset_ns - truth} ns, stated +-{est.err_ns} ns")
    assert abs(est.offset_ns - truth) <= est.err_ns, (est, truth)
    assert est.err_ns < 50_000_000, "a loopback round trip should not take 100 ms"


def dist_client(port: int) -> object:
    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, None, False, timeout=datetime.timedelta(seconds=20))


TWO_HOSTS = """
name = "two-hosts"
[workload]
kind = "ddp"
world_size = 4
steps = 40
pg_timeout_s = 5
[launch]
ranks_per_host = 2
agents = true
clock_shift_s = 1000
[recovery]
strategy = "reinit"
[[faults]]
kind = "kill"
target = { host = 1 }
trigger = { at_step = 10, jitter = "step" }
[measure]
trials = 1
deadline_s = 60
"""


def _no_namespaces_left(host: ProcessHost) -> None:
    from injectors.link import system

    tag = system.tag_for(host.run_id)
    left = [n for n in system.namespaces() if f"-{tag}-" in n]
    assert not left, f"namespaces left after the trial: {left}"


@pytest.mark.timeout(120)
def test_forged_commands_and_reports_are_refused_and_change_nothing(
    run_scenario, host: ProcessHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone who reaches the trial's store but has not the run's secret posts, once
    training starts: a kill of rank 1 sealed with another secret, a stop in plain JSON
    (to h1's agent), and a report that rank 0 died (as h0's agent). Each is refused and
    logged; the job trains to its end as if nothing had been posted."""
    _need_time_namespaces()
    real = AgentLauncher.start_rank
    forger = Sealer("a-guess-at-the-secret-0123456789", "anything")

    def start_and_forge(self: AgentLauncher, rank: int, *args: object) -> object:
        out = real(self, rank, *args)
        if rank == 1:
            send(self.control, forger, "h1", {"op": "kill", "rank": 1})
            n = int(self.control.add(key("h1", "ncmd"), 1)) - 1
            self.control.set(key("h1", f"cmd/{n}"), json.dumps({"op": "stop"}))
            enqueue(self.control, forger, "h0", "exit", {"rank": 0, "exitcode": 1})
        return out

    monkeypatch.setattr(AgentLauncher, "start_rank", start_and_forge)
    fault_free = ONE_RANK_EACH.split("[[faults]]")[0] + "[measure]\ntrials = 1\ndeadline_s = 60\n"
    report = run_scenario(fault_free.replace("steps = 40", "steps = 150"))
    (row,) = rows(report)
    assert row["outcome"] == "completed" and row["steps_done"] == 150, row
    events = read_events(next(report.rundir.path.glob("events/*/0")))
    refused = sorted((e.get("host", e["src"]), e["key"]) for e in events if e["event"] == "refused")
    assert refused == [("h1", "agent/h1/cmd/1"), ("h1", "agent/h1/cmd/2"), ("harness", "agent/h0/exit/0")], refused
    assert not [e for e in events if e["event"] == "proc_exit" and e.get("exitcode") not in (0, None)]


@pytest.mark.timeout(120)
def test_node_loss_across_two_hosts_with_their_own_clocks(run_scenario, host: ProcessHost) -> None:
    """Two hosts whose monotonic clocks are 1000 s and 2000 s ahead of the harness's: a
    wrong alignment would make ttd_s about +-1000 s; the stated uncertainty must cover
    the true offsets, which the time namespaces make known exactly."""
    _need_time_namespaces()
    report = run_scenario(TWO_HOSTS)
    _no_namespaces_left(host)
    (row,) = rows(report)
    assert row["outcome"] == "recovered", row["error"]
    # A detection cannot precede the injection, and this one comes within the trial.
    assert 0 < float(row["ttd_s"]) < 60
    assert 0 <= float(row["ttd_err_s"]) < 0.05, "a round trip on one machine does not take 100 ms"
    clocks = report.rundir.read_run_json()["host_clocks"]
    (per_trial,) = clocks.values()
    for h, c in per_trial["0"].items():
        truth = -c["monotonic_shift_ns"]
        assert abs(c["offset_ns"] - truth) <= c["err_ns"], (h, c)
        assert c["end"] is not None, f"{h} measured no end offset"
    errs = [int(c["err_ns"]) for c in per_trial["0"].values()]
    # The hosts wrote the figures' stamps; the cross-host bound is the two hosts' sum.
    assert float(row["clock_err_s"]) * 1e9 == pytest.approx(sum(errs), abs=2)
    events = [e for e in read_events(next(report.rundir.path.glob("events/*/0"))) if e["event"] == "inject"]
    assert [e.get("host") for e in events] == ["h1"], "the kill is carried out by host h1's agent"


ONE_RANK_EACH = TWO_HOSTS.replace("world_size = 4", "world_size = 2").replace(
    "ranks_per_host = 2", "ranks_per_host = 1"
)
"""Two hosts of one rank: what the hygiene tests need, at half the start-up cost."""

STALLED = ONE_RANK_EACH.replace("steps = 40", "steps = 100000").replace(
    'kind = "kill"\ntarget = { host = 1 }\ntrigger = { at_step = 10, jitter = "step" }',
    'kind = "stall"\nduration_s = 30\ntarget = { host = 1 }\ntrigger = { at_step = 2 }',
)


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("ftb")}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["sigkill", "ctrl-c"])
def test_killed_harness_leaves_no_agent_rank_or_namespace(tmp_path: Path, write_scenario, sig: int) -> None:
    """SIGKILL (or Ctrl-C) the harness while host h1's agent holds its ranks stopped:
    after SIGKILL the guard must sweep the agents, their forkservers and ranks (time
    namespaces die with their last process) and the undo record must remove the hosts'
    network namespaces; after Ctrl-C the harness does it itself."""
    _need_time_namespaces()
    assert "stall" in STALLED
    harness = subprocess.Popen(
        [sys.executable, "-m", "bench", "run", str(write_scenario(STALLED)), "--out", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            agent_log = list(tmp_path.rglob("agent-h1.jsonl"))
            if agent_log and '"inject"' in agent_log[0].read_text():
                break
            time.sleep(0.2)
        else:
            pytest.fail("host h1's agent did not carry out the stall in time")
        run = run_of(harness)
        assert run is not None, "the harness should have a guard"
        run_pids = set(marked_pids(run))
        assert len(run_pids) >= 6, "expected guard, store, two agents and two ranks"
        # This run's namespaces: those of the topology host h1's agent lives in (other
        # runs on this machine may make and remove namespaces of their own meanwhile).
        agent_pid = json.loads(agent_log[0].read_text().splitlines()[0])["pid"]
        where = subprocess.run(["ip", "netns", "identify", str(agent_pid)], capture_output=True, text=True, timeout=30)
        prefix = where.stdout.strip().rsplit("-", 1)[0] + "-"
        assert prefix.startswith("ftb-"), f"host h1's agent is in no ftbench namespace: {where.stdout!r}"
        ours = lambda: {n for n in _namespaces() if n.startswith(prefix)}
        assert ours(), "the hosts' namespaces should exist while the harness dies"
        os.kill(harness.pid, sig)
        harness.wait(timeout=60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (any(alive(p) for p in run_pids) or ours()):
            time.sleep(0.2)
        assert not [p for p in run_pids if alive(p)], "processes outlived the harness"
        assert not ours(), f"namespaces outlived the harness: {ours()}"
    finally:
        if harness.poll() is None:
            harness.kill()


@pytest.mark.timeout(120)
def test_sigkill_of_a_host_agent_ends_its_host_and_leaves_nothing(run_scenario, host: ProcessHost, tmp_path) -> None:
    """A host agent SIGKILLed mid-training takes its host's ranks with it (they die with
    their forkserver, which dies with the agent); the harness notices the lost host, the
    trial ends without reaching its deadline, and nothing of it is left."""
    import threading

    _need_time_namespaces()
    text = ONE_RANK_EACH.split("[[faults]]")[0].replace("steps = 40", "steps = 400") + "[measure]\ntrials = 1\n"
    text += "deadline_s = 90\nreference = false\n"
    box: dict[str, object] = {}

    def go() -> None:
        try:
            box["report"] = run_scenario(text)
        except BaseException as err:
            box["error"] = err

    runner = threading.Thread(target=go, daemon=True)
    runner.start()
    deadline = time.monotonic() + 60
    agent_pid = 0
    while time.monotonic() < deadline and not agent_pid:
        for path in tmp_path.rglob("agent-h1.jsonl"):
            ranks = list(path.parent.glob("rank0-*.jsonl"))
            if ranks and '"step_end"' in ranks[0].read_text():
                agent_pid = json.loads(path.read_text().splitlines()[0])["pid"]
        time.sleep(0.1)
    assert agent_pid, "the trial did not start training in time"
    os.kill(agent_pid, signal.SIGKILL)
    runner.join(100)
    assert not runner.is_alive(), "the trial did not end after losing a host agent"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    _no_namespaces_left(host)
    (row,) = rows(box["report"])  # type: ignore[arg-type]
    assert row["outcome"] != "hung"


RESTART = ONE_RANK_EACH.replace('strategy = "reinit"', 'strategy = "restart"').replace("steps = 40", "steps = 30")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_restart_under_torchrun_nnodes_2_recovers_from_losing_a_host(run_scenario, host: ProcessHost) -> None:
    """Real torchrun --nnodes 2, one elastic agent per host (each started by its host
    agent, c10d rendezvous on host h0's address): host h1's workers are SIGKILLed, both
    agents tear down, re-rendezvous and train on to the end from the checkpoint."""
    _need_time_namespaces()
    report = run_scenario(RESTART)
    _no_namespaces_left(host)
    (row,) = rows(report)
    assert row["outcome"] == "recovered", row["error"]
    assert 0 < float(row["ttd_s"]) < 60 and 0 < float(row["ttr_s"]) < 120
    events = read_events(next(report.rundir.path.glob("events/*/0")))
    rendezvous = {e["host"] for e in events if e["event"] == "rendezvous_end" and e.get("src") == "agent"}
    assert rendezvous == {"h0", "h1"}, "one elastic agent per host"
    (inject,) = [e for e in events if e["event"] == "inject"]
    assert inject["host"] == "h1"


HOST_DOWN = (
    RESTART.replace('kind = "kill"', 'kind = "host-down"')
    .replace('trigger = { at_step = 10, jitter = "step" }', "trigger = { at_step = 10 }")
    .replace("[[faults]]", "[recovery.restart]\nmin_nodes = 1\ncheckpoint_every = 5\n[[faults]]")
    .replace("[recovery.restart]", "[recovery.restart]\nrdzv_last_call_timeout_s = 1")
    .replace("deadline_s = 60", "deadline_s = 100")
)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_restart_with_min_nodes_goes_on_without_a_host_that_is_gone(run_scenario, host: ProcessHost) -> None:
    """host-down takes h1 away whole (its host agent, elastic agent and workers, by
    SIGKILL). Under ``torchrun --nnodes 1:2`` the elastic agent on h0 re-rendezvouses
    alone and trains on in a world of h0's worker; the phases add up as on one host."""
    _need_time_namespaces()
    report = run_scenario(HOST_DOWN)
    _no_namespaces_left(host)
    (row,) = rows(report)
    assert row["outcome"] == "recovered", row["error"]
    phases = [v for k, v in row.items() if k.startswith("phase_") and v is not None]
    assert sum(phases) == pytest.approx(row["downtime_s"], rel=1e-6)
    events = read_events(next(report.rundir.path.glob("events/*/0")))
    (inject,) = [e for e in events if e["event"] == "inject"]
    assert inject["host"] == "h1" and inject["kind"] == "host-down"
    after = {e["world_size"] for e in events if e["event"] == "pg_ready" and e.get("gen", 0) > 0}
    assert after == {1}, "the restarted world is h0's worker (one rank per host)"
    agents = [e for e in events if e["event"] == "proc_start" and e.get("role") == "host_agent"]
    assert {e["host"] for e in agents} == {"h0", "h1"}


TORCHFT = (
    TWO_HOSTS.replace('strategy = "reinit"', 'strategy = "torchft"')
    .replace("steps = 40", "steps = 600")
    .replace('trigger = { at_step = 10, jitter = "step" }', "trigger = { at_step = 40 }")
    .replace("deadline_s = 60", "deadline_s = 120")
)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_torchft_replicas_on_two_hosts_heal_across_them(run_scenario, host: ProcessHost) -> None:
    """One lighthouse (with the harness, on the address the hosts reach), two replica
    groups per host. Host h1's replicas die; the lighthouse drops them; their
    replacements start on h1 and heal over HTTP from a live replica on h0."""
    pytest.importorskip("torchft")
    _need_time_namespaces()
    report = run_scenario(TORCHFT)
    _no_namespaces_left(host)
    (row,) = rows(report)
    assert row["outcome"] == "recovered", row["error"]
    assert row["blame_correct"] != 0.0, "the quorum dropped h1's replicas, no others (or named none)"
    events = read_events(next(report.rundir.path.glob("events/*/0")))
    heals = [e for e in events if e["event"] == "restore_end" and e.get("how") == "peer"]
    assert heals, "a replacement healed from a peer"
    assert {e["host"] for e in heals} == {"h1"} and all(e["source"] in (0, 1) for e in heals), heals
    assert all(e["bytes"] > 0 for e in heals)


UPLINK = (
    TWO_HOSTS.replace("steps = 40", "steps = 300")
    .replace("pg_timeout_s = 5", "pg_timeout_s = 3")
    .replace('kind = "kill"', 'kind = "partition"\nduration_s = 8')
    .replace('trigger = { at_step = 10, jitter = "step" }', "trigger = { at_step = 40 }")
    .replace("deadline_s = 60", "deadline_s = 90")
)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_cut_uplink_of_one_host_is_a_timeout_and_reinit_evicts_that_host(run_scenario, host: ProcessHost) -> None:
    """The harness cuts host h1's link in its namespace (on one machine the hosts'
    namespaces are its to change); the ranks see nothing until the process-group timeout,
    reinit then evicts h1's ranks, and the figures are mapped across the hosts' clocks."""
    _need_time_namespaces()
    report = run_scenario(UPLINK)
    _no_namespaces_left(host)
    (row,) = rows(report)
    assert row["outcome"] == "recovered", row["error"]
    assert row["detect_how"] == "timeout" and 3 - 0.5 < row["ttd_s"] < 3 + 2, row
    assert row["blame_correct"] == 1.0 and 0 < row["ttd_err_s"] < 0.01, row
