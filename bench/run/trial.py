"""The trial driver: launch, watch, inject, undo, tear down, compute the figures.

One loop, ticking every few milliseconds: read new events, fire the faults whose
trigger is met, undo transient faults that are due, and let the strategy's job reap
its processes. The loop ends when the job is over, at the trial deadline (outcome
``hung``: everything is killed), or on an interrupt. Whatever ends it, the ``finally``
clause undoes every fault and kills every process of the trial.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from bench.results.derive import FaultFigures, TrialFacts, fault_figures, trial_facts
from bench.results.events import Event, EventTail, EventWriter, read_events
from bench.run.schedule import ScheduledFault, TrialState
from bench.scenario.faults import FAULTS
from bench.scenario.loader import uses_namespaces
from bench.scenario.model import Scenario
from bench.strategies import STRATEGIES
from bench.strategies.base import Job, TrialContext

TICK_S = 0.005
"""Monitor period: bounds the lag of a trigger and of an undo, not any figure (figures
come from timestamps taken where things happen)."""


@dataclass
class TrialResult:
    faults: list[FaultFigures]
    facts: TrialFacts
    events: list[Event]
    wall_s: float
    outcome: str
    """``ended``, ``hung`` or ``interrupted``: how the driver loop ended."""
    versions: dict[str, Any]


def run_trial(ctx: TrialContext, *, reference: TrialFacts | None = None) -> TrialResult:
    scenario = ctx.point.scenario
    if ctx.events_dir.exists():
        shutil.rmtree(ctx.events_dir)  # a trial cut short by an interrupt is run again whole
    ctx.events_dir.mkdir(parents=True)
    harness = EventWriter(ctx.events_dir / "harness.jsonl", src="harness")
    if uses_namespaces(scenario):
        from injectors.link import netns

        ctx = replace(ctx, network=netns.Topology.create(
            netns.tag_for(ctx.host.run_id), scenario.workload.world_size // scenario.launch.ranks_per_host,
            wire_packets=scenario.launch.wire_packets))
    job: Job = STRATEGIES[scenario.recovery.strategy].load()(ctx)
    namespaces = {r: ctx.namespace_of(r) for r in range(scenario.workload.world_size)} if ctx.network else {}
    faults = [] if ctx.fault_free else [
        ScheduledFault(i, f, seed=scenario.measure.seed, trial=ctx.trial,
                       ranks_per_host=scenario.launch.ranks_per_host, namespaces=namespaces)
        for i, f in enumerate(scenario.faults)
    ]
    tail = EventTail(ctx.events_dir)
    state = TrialState()
    start = time.monotonic_ns()
    harness.emit("trial_start", t=start, trial=ctx.trial, point_hash=ctx.point.point_hash,
                 strategy=scenario.recovery.strategy, fault_free=ctx.fault_free, deadline_s=ctx.deadline_s)
    deadline = start + int(ctx.deadline_s * 1e9)
    outcome = "interrupted"
    try:
        job.start()
        while True:
            for e in tail.poll():
                state.feed(e)
            now = time.monotonic_ns()
            for fault in faults:
                fault.poll(state, now, harness)
            if job.poll(TICK_S):
                outcome = "ended"
                break
            if time.monotonic_ns() > deadline:
                outcome = "hung"
                break
    finally:
        for fault in faults:
            fault.undo_all(harness)
        job.close()
        if ctx.network is not None:
            ctx.network.destroy()
        harness.emit("trial_end", outcome=outcome)
        harness.close()
    events = read_events(ctx.events_dir)
    w = scenario.workload
    facts = trial_facts(events, steps=w.steps, warmup_steps=w.warmup_steps)
    figures = fault_figures(
        events,
        faults=[] if ctx.fault_free else [(f.kind, f.target.text()) for f in scenario.faults],
        steps=w.steps, warmup_steps=w.warmup_steps, phases=STRATEGIES[scenario.recovery.strategy].phases,
        reference=reference,
    )
    return TrialResult(faults=figures, facts=facts, events=events,
                       wall_s=(time.monotonic_ns() - start) / 1e9, outcome=outcome, versions=job.versions())


def unavailable(scenario: Scenario) -> str | None:
    """Why this point cannot run on this machine (no root for namespaces, no NFQUEUE
    stage...), or None. Checked before its trials, so a point is skipped with a reason
    instead of failing each trial."""
    why = STRATEGIES[scenario.recovery.strategy].load().unavailable(scenario)
    if why or not uses_namespaces(scenario):
        return why
    from injectors.link import netns

    reason = netns.available()
    if reason:
        return f"network namespaces: {reason}"
    for i, f in enumerate(scenario.faults):
        if FAULTS[f.kind].family == "link":
            why = FAULTS[f.kind].load()(**asdict(f.params)).unavailable()
            if why:
                return f"faults.{i} ({f.kind}): {why}"
    return None
