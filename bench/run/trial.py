"""The trial driver: launch, watch, inject, undo, tear down, compute the figures.

One loop, ticking every few milliseconds: read new events, fire the faults whose
trigger is met, undo transient faults that are due, and let the strategy's job reap
its processes. The loop ends when the job is over, at the trial deadline (outcome
``hung``: everything is killed), or on an interrupt. Whatever ends it, the ``finally``
clause undoes every fault and kills every process of the trial.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.jobs.job import Job, TrialContext, TrialNetwork
from bench.procs.events import Event, EventTail, EventWriter, read_clocks, read_events
from bench.procs.oom import kernel_offset_ns, oom_records
from bench.procs.resources import Counter, Sampler
from bench.procs.trialmachine import TrialMachine
from bench.results.derive import fault_figures
from bench.results.facts import FaultFigures, TrialFacts, trial_facts
from bench.run.hangs import StackDumps, tolerance
from bench.run.schedule import ScheduledFault, TrialState, schedule
from bench.run.watchdog import WatchdogLog
from bench.scenario.crosscheck import uses_namespaces
from bench.scenario.faults import FAULTS
from bench.scenario.model import Scenario
from bench.scenario.strategy import STRATEGIES

TICK_S = 0.005
"""Monitor period while a fault is still to fire or to undo: it bounds the lag of a
trigger and of an undo, not any figure (figures come from timestamps taken where things
happen)."""
IDLE_TICK_S = 0.05
"""Monitor period once no fault has anything left to do (and in fault-free trials): the
harness shares the cores with the ranks, so it wakes no more than it must. Process
exits still wake it at once (it waits on their sentinels)."""


@dataclass
class TrialResult:
    faults: list[FaultFigures]
    facts: TrialFacts
    events: list[Event]
    wall_s: float
    outcome: str
    """``ended``, ``hung`` or ``interrupted``: how the driver loop ended."""
    versions: dict[str, Any]
    clocks: dict[str, dict[str, Any]]
    """Agent hosts' clock offsets to the harness's and their uncertainty ({} on one host)."""


def run_trial(ctx: TrialContext, *, reference: TrialFacts | None = None) -> TrialResult:
    scenario = ctx.scenario
    if ctx.events_dir.exists():
        shutil.rmtree(ctx.events_dir)  # a trial cut short by an interrupt is run again whole
    ctx.events_dir.mkdir(parents=True)
    harness = EventWriter(ctx.events_dir / "harness.jsonl", src="harness")
    ctx = replace(ctx, network=_network(ctx))
    machine = TrialMachine.set_up(
        scenario,
        run_id=ctx.host.run_id,
        name=f"{ctx.host.run_id}-{ctx.point.point_hash[:12]}-{ctx.events_dir.name}",
        checkpoint_dir=ctx.checkpoint_dir,
    )
    ctx = replace(ctx, memory_cgroup=str(machine.cgroup or ""))
    job: Job = STRATEGIES[scenario.recovery.strategy].load()(ctx)
    faults = [] if ctx.fault_free else _schedule(ctx)
    tolerance_s, tolerance_key = tolerance(scenario)
    dumps = StackDumps.for_scenario(scenario, ctx.events_dir, harness) if faults else None
    start = harness.emit(
        "trial_start",
        trial=ctx.trial,
        point_hash=ctx.point.point_hash,
        strategy=scenario.recovery.strategy,
        fault_free=ctx.fault_free,
        deadline_s=ctx.deadline_s,
        tolerance_s=tolerance_s,
        tolerance_key=tolerance_key,
        cpu_s=time.process_time(),  # the harness's own CPU time, as trial_end's
        **machine.describe(),
    )
    outcome = "interrupted"
    tail = EventTail(ctx.events_dir)
    sampler = _sampler(ctx) if scenario.measure.resources else None
    try:
        if sampler is not None:
            sampler.start()
        job.start()
        tail.clocks = job.clocks()  # agent hosts' stamps, mapped onto ours for the triggers
        for fault in faults:
            fault.deliver = job.deliver()
        watchdog = WatchdogLog(ctx.events_dir, harness) if ctx.backend == "nccl" else None
        outcome = _drive(
            job, faults, tail, harness, deadline=start + int(ctx.deadline_s * 1e9), watchdog=watchdog, dumps=dumps
        )
    finally:
        tail.close()
        if dumps is not None:
            dumps.close()
        for fault in faults:
            fault.undo_all(harness)
        if sampler is not None:
            harness.emit("resources", **sampler.stop())
        job.close()
        if ctx.network is not None:
            ctx.network.destroy()
        for problem in machine.close():
            harness.emit("cleanup_problem", what=problem)
        kills = _oom_kills(ctx.events_dir, start)
        offset = kernel_offset_ns() if kills else None
        for rank, pid, stamp, message in kills:
            # t_kill: the kill's moment on CLOCK_MONOTONIC (the kernel's clock differs by ms)
            at = {} if offset is None else {"t_kill": stamp + offset}
            harness.emit("oom_kill", rank=rank, pid=pid, t_kernel=stamp, message=message, **at)
        harness.emit("trial_end", outcome=outcome, cpu_s=time.process_time())
        harness.close()
    return _result(ctx, job, outcome, start, reference)


def _oom_kills(events_dir: Path, since_ns: int) -> list[tuple[int, int, int, str]]:
    """(rank, pid, the kernel's stamp of the kill, its message) of each rank process the
    OOM killer ended during the trial: its SIGKILL looks like any other, the kernel's
    log tells (and when, on the kernel's clock: :func:`kernel_offset_ns` maps it)."""
    pids: dict[int, int] = {}
    # A rank's own events (``rankR-PID``), or the probe's on a command job's rank.
    for path in [*events_dir.glob("rank*-*.jsonl"), *events_dir.glob("probe-rank*-*.jsonl")]:
        rank, _, pid = path.stem.removeprefix("probe-").removeprefix("rank").partition("-")
        if rank.isdigit() and pid.isdigit():
            pids[int(pid)] = int(rank)
    return [(pids[pid], pid, t, msg) for pid, (t, msg) in sorted(oom_records(pids, since_ns=since_ns).items())]


def _network(ctx: TrialContext) -> TrialNetwork | None:
    """Namespaced hosts for link faults; a private namespace for a stack whose servers
    cannot be told where to bind, where this machine allows it; else the loopback."""
    from injectors.link import netns, system

    s, tag = ctx.scenario, system.tag_for(ctx.host.run_id)
    if ctx.cluster is not None:
        return None  # real hosts: their own networks
    if uses_namespaces(s) or s.launch.agents:
        return netns.Topology.create(
            tag, s.workload.world_size // s.launch.ranks_per_host, wire_packets=s.launch.wire_packets
        )
    if confinable(s):
        return netns.PrivateNet.create(tag)
    return None


def confinable(scenario: Scenario) -> bool:
    """Whether the trials of ``scenario`` run in a private network namespace: its stack
    has servers that listen on every interface, or its bytes on the wire are counted
    (``measure.resources``), and namespaces work here (root)."""
    from injectors.link import system

    wanted = bool(STRATEGIES[scenario.recovery.strategy].unbound_servers) or scenario.measure.resources
    return wanted and system.available() is None


def _sampler(ctx: TrialContext) -> Sampler:
    """A sampler of the trial's processes and of its hosts' transmit counters."""
    from injectors.link import netns

    host, harness = ctx.host, os.getpid()
    net, counters, how = ctx.network, [], ""

    def opened(namespace: str) -> int:
        return netns.run_in(namespace, os.open, "/proc/thread-self/net/dev", os.O_RDONLY | os.O_CLOEXEC)

    if isinstance(net, netns.Topology):
        counters = [Counter(h.name, opened(h.namespace), h.ifname) for h in net.hosts]
        how = "each host namespace's eth0 transmit bytes, summed (headers included)"
    elif isinstance(net, netns.PrivateNet):
        counters = [Counter("job", opened(net.namespace), "lo")]
        how = "the trial's private network namespace's loopback transmit bytes (headers included)"
    # Asked at each sample: the forkserver may start during the trial.
    return Sampler(
        run_id=host.run_id, exclude=lambda: {harness, *host.infrastructure()}, counters=counters, wire_how=how
    )


def _schedule(ctx: TrialContext) -> list[ScheduledFault]:
    s = ctx.scenario
    namespaces = {r: ctx.namespace_of(r) for r in range(s.workload.world_size)} if ctx.network else {}
    return schedule(
        s.faults, seed=s.measure.seed, trial=ctx.trial, ranks_per_host=s.launch.ranks_per_host, namespaces=namespaces
    )


def _drive(
    job: Job,
    faults: list[ScheduledFault],
    tail: EventTail,
    harness: EventWriter,
    *,
    deadline: int,
    watchdog: WatchdogLog | None,
    dumps: StackDumps | None = None,
) -> str:
    """The driver loop: follow the events, fire and undo faults, let the job reap; how it ended."""
    state = TrialState()
    while True:
        busy = any(f.busy() for f in faults)
        watching = dumps is not None and dumps.watching()
        if busy or watching:  # only triggers, targets and hang dumps need the events as they happen
            for e in tail.poll():
                state.feed(e)
                if dumps is not None:
                    dumps.feed(e)
        if watchdog is not None:
            watchdog.poll()
        now = time.monotonic_ns()
        if watching and dumps is not None:
            dumps.tick(now)
        for fault in faults:
            fault.poll(state, now, harness)
        # A firing drawn for a point of a step is woken for at that point, not at the next tick.
        due = [f.fire_at for f in faults if f.fire_at is not None]
        wait_s = TICK_S if busy else IDLE_TICK_S
        if due:
            wait_s = min(wait_s, max(0.0, (min(due) - time.monotonic_ns()) / 1e9))
        if job.poll(wait_s):
            return "ended"
        if time.monotonic_ns() > deadline:
            return "hung"


def _result(ctx: TrialContext, job: Job, outcome: str, start: int, reference: TrialFacts | None) -> TrialResult:
    """The trial's figures, from its event logs read whole once every writer is gone."""
    s = ctx.scenario
    observed = job.observe(read_events(ctx.events_dir))
    events = observed.events
    w = s.workload
    steps = observed.steps or w.steps
    figures = fault_figures(
        events,
        faults=[] if ctx.fault_free else [(f.kind, f.target.text()) for f in s.faults],
        steps=steps,
        warmup_steps=w.warmup_steps,
        phases=STRATEGIES[s.recovery.strategy].phases,
        reference=reference,
        blame=STRATEGIES[s.recovery.strategy].blame,
    )
    if observed.blind or observed.sources:
        for f in figures:
            f.observed_from_outside(observed.blind, observed.sources)
    return TrialResult(
        faults=figures,
        facts=trial_facts(events, steps=steps, warmup_steps=w.warmup_steps),
        events=events,
        wall_s=(time.monotonic_ns() - start) / 1e9,
        outcome=outcome,
        versions=job.versions(),
        clocks=read_clocks(ctx.events_dir),
    )


def unavailable(scenario: Scenario, *, cluster: bool = False) -> str | None:
    """Why this point cannot run on this machine (no root for namespaces, no NFQUEUE
    stage...), or None. Checked before its trials, so a point is skipped with a reason
    instead of failing each trial. ``cluster``: the hosts are real (``--agents-at``)."""
    job: type[Job] = STRATEGIES[scenario.recovery.strategy].load()
    why = _torch_unavailable(scenario) or job.unavailable(scenario) or _agents_unavailable(scenario, cluster=cluster)
    if why or cluster or not (uses_namespaces(scenario) or scenario.launch.agents):
        return why
    from injectors.link import system

    reason = system.available()
    if reason:
        return f"network namespaces: {reason}"
    for i, f in enumerate(scenario.faults):
        if FAULTS[f.kind].family == "link":
            why = FAULTS[f.kind].load()(**f.knobs()).unavailable()
            if why:
                return f"faults.{i} ({f.kind}): {why}"
    return None


def _torch_unavailable(scenario: Scenario) -> str | None:
    """Why the stack this harness runs cannot serve the point's strategy, or None: its
    torch (``Strategy.torch``) or a package outside ``Package.supported``, asked of the
    running environment, whatever launch.env said."""
    import importlib.metadata

    import torch

    strategy = STRATEGIES[scenario.recovery.strategy]
    if not strategy.serves_torch(torch.__version__):
        return f"{strategy.name} needs torch {strategy.torch}; this environment has torch {torch.__version__}"
    for package in strategy.packages:
        for dist in package.dists:
            try:
                why = package.gap(importlib.metadata.version(dist))
            except importlib.metadata.PackageNotFoundError:
                continue
            if why:
                return f"{strategy.name}: {why} (installed in this environment)"
    return None


def _agents_unavailable(scenario: Scenario, *, cluster: bool) -> str | None:
    """Why ``launch.agents`` cannot run here, or None (also when it is off)."""
    if not scenario.launch.agents:
        return None

    strategy = STRATEGIES[scenario.recovery.strategy]
    if not strategy.agents:
        return f"launch.agents: strategy {strategy.name} does not run under host agents yet (docs/multihost.md)"
    if shutil.which("unshare") is None and not cluster:
        return "launch.agents: unshare (util-linux) is not installed; host clocks are time namespaces"
    if cluster and any(FAULTS[f.kind].family == "link" for f in scenario.faults):
        return (
            "--agents-at: link faults on a cluster's hosts are not carried out by their agents yet (docs/multihost.md)"
        )
    return None
