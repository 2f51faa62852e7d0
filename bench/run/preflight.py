"""What a run records once, before the first trial that needs it: which of the stack's
servers listen beyond loopback (and whether they were confined), and what the userspace
NFQUEUE stage of link faults costs when it delays and corrupts nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.run.trial import confinable
from bench.scenario.crosscheck import uses_namespaces
from bench.scenario.faults import FAULTS
from bench.scenario.model import Scenario
from bench.scenario.strategy import STRATEGIES

Progress = Callable[[str], None]


def exposure(scenario: Scenario, info: dict[str, Any], progress: Progress, *, cluster: bool) -> None:
    """Say in run.json, and once on the console, which servers of the stack listen
    beyond loopback and whether they were confined (a private network namespace)."""
    name = scenario.recovery.strategy
    servers = STRATEGIES[name].unbound_servers
    records = info.setdefault("exposure", {})
    if not servers or name in records:
        return
    confined, how, note = _confinement(scenario, cluster=cluster)
    records[name] = {"servers": list(servers), "confined": confined, "how": how}
    if note:
        progress(f"  note: {name}: {', '.join(servers)} listen on every interface {note}")


def _confinement(scenario: Scenario, *, cluster: bool) -> tuple[bool, str, str]:
    """Whether the stack's servers are kept off the host's interfaces, how (or why not),
    and what to say of it on the console ("" when they are kept off)."""
    if cluster:
        how = "real hosts (--agents-at): they listen as the stack makes them, on every interface"
        return False, how, "of the hosts"
    if scenario.launch.agents:
        return True, "each host in a network namespace of its own, on a bridge of the trial's", ""
    if confinable(scenario):
        return True, "each trial in a private network namespace with only a loopback", ""
    from injectors.link import system

    why = system.available() or "namespaces unavailable"
    return False, f"not confined: {why}", f"during its trials and could not be confined here ({why})"


def stage_overhead(scenario: Scenario, info: dict[str, Any], progress: Progress, *, run_id: str) -> None:
    """Once per run, if a link fault is served by the userspace NFQUEUE stage: what the
    stage costs when it delays and corrupts nothing, to report beside those figures."""
    if "link_stage_overhead" in info or not uses_namespaces(scenario):
        return
    from injectors.link import netns, netprobe, system

    staged = [
        f
        for f in scenario.faults
        if FAULTS[f.kind].family == "link" and FAULTS[f.kind].load()(**f.knobs()).uses_stage()
    ]
    if not staged:
        return
    # The run's own tag: a concurrent `ftbench cleanup` knows the topology is live.
    with netns.Topology.create(system.tag_for(run_id), 2, wire_packets=scenario.launch.wire_packets) as topo:
        overhead = netprobe.stage_overhead(topo)
    info["link_stage_overhead"] = overhead
    progress(
        f"  NFQUEUE stage (serves delay/corrupt here, no netem): clean {overhead['clean_mbit_s']:.0f} Mbit/s, "
        f"pass-through {overhead['passthrough_mbit_s']:.0f} Mbit/s ({overhead['slowdown']:.1f}x slower)"
    )
