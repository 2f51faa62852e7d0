"""The trial driver: launch, watch, inject, undo, tear down, compute the figures.

One loop, ticking every few milliseconds: read new events, fire the faults whose
trigger is met, undo transient faults that are due, and let the strategy's job reap
its processes. The loop ends when the job is over, at the trial deadline (outcome
``hung``: everything is killed), or on an interrupt. Whatever ends it, the ``finally``
clause undoes every fault and kills every process of the trial.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from bench.events import Event, EventTail, EventWriter, read_events
from bench.faults import FAULTS
from bench.metrics import FaultFigures, fault_figures, summarize, TrialSummary
from bench.scenario import FaultSpec
from bench.strategies import STRATEGIES
from bench.strategies.base import Job, TrialContext
from injectors.base import Target

TICK_S = 0.005
"""Monitor period: bounds the lag of a trigger and of an undo, not any figure (figures
come from timestamps taken where things happen)."""


@dataclass
class TrialState:
    """What the harness knows of a running trial, from the events so far."""

    pids: dict[int, int] = field(default_factory=dict)
    """Launch rank -> pid of its newest process."""
    exited: set[int] = field(default_factory=set)
    max_step: int = 0
    first_step_t: int | None = None

    def feed(self, e: Event) -> None:
        kind = e["event"]
        if kind == "proc_start" and e.get("src") == "rank":
            self.pids[int(e["rank"])] = int(e["pid"])
        elif kind == "proc_exit" and e.get("src") == "rank":
            self.exited.add(int(e["pid"]))
        elif kind == "step_end":
            self.max_step = max(self.max_step, int(e["step"]))
            if self.first_step_t is None:
                self.first_step_t = e["t"]

    def live_pids(self, ranks: tuple[int, ...]) -> list[int]:
        return [self.pids[r] for r in ranks if r in self.pids and self.pids[r] not in self.exited]


@dataclass
class ArmedFault:
    index: int
    spec: FaultSpec
    injector: Any
    fired_t: int | None = None
    undone: bool = False

    def due(self, state: TrialState, now: int) -> bool:
        if self.fired_t is not None:
            return False
        trig = self.spec.trigger
        if trig.at_step is not None:
            return state.max_step >= trig.at_step
        if trig.after_s is not None:
            return state.first_step_t is not None and now - state.first_step_t >= trig.after_s * 1e9
        return False

    def undo_due(self, now: int) -> bool:
        duration = getattr(self.injector, "duration_s", None)
        return (self.fired_t is not None and not self.undone and duration is not None
                and now - self.fired_t >= duration * 1e9)


@dataclass
class TrialResult:
    faults: list[FaultFigures]
    summary: TrialSummary
    events: list[Event]
    wall_s: float
    outcome: str
    """``ended``, ``hung`` or ``interrupted``: how the driver loop ended."""
    versions: dict[str, Any]


def run_trial(ctx: TrialContext, *, reference: TrialSummary | None = None) -> TrialResult:
    scenario = ctx.point.scenario
    if ctx.events_dir.exists():
        shutil.rmtree(ctx.events_dir)  # a trial cut short by an interrupt is run again whole
    ctx.events_dir.mkdir(parents=True)
    harness = EventWriter(ctx.events_dir / "harness.jsonl", src="harness")
    job: Job = STRATEGIES[scenario.recovery.strategy].load()(ctx)
    armed = [] if ctx.fault_free else [
        ArmedFault(index=i, spec=f, injector=FAULTS[f.kind].load()(**dataclasses.asdict(f.params)))
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
            for fault in armed:
                if fault.due(state, now):
                    _inject(fault, state, harness)
                elif fault.undo_due(now):
                    _undo(fault, harness)
            if job.poll(TICK_S):
                outcome = "ended"
                break
            if time.monotonic_ns() > deadline:
                outcome = "hung"
                break
    finally:
        for fault in armed:
            if fault.fired_t is not None and not fault.undone:
                _undo(fault, harness)
        job.close()
        harness.emit("trial_end", outcome=outcome)
        harness.close()
    events = read_events(ctx.events_dir)
    w = scenario.workload
    summary = summarize(events, steps=w.steps, warmup_steps=w.warmup_steps)
    figures = fault_figures(
        events,
        faults=[] if ctx.fault_free else [(f.kind, ",".join(map(str, f.target.ranks))) for f in scenario.faults],
        steps=w.steps, warmup_steps=w.warmup_steps, phases=job.phases,
        reference_final_loss=reference.final_loss if reference else float("nan"),
        reference_step_s=reference.ff_step_s if reference else float("nan"),
    )
    return TrialResult(faults=figures, summary=summary, events=events,
                       wall_s=(time.monotonic_ns() - start) / 1e9, outcome=outcome, versions=job.versions())


def _inject(fault: ArmedFault, state: TrialState, harness: EventWriter) -> None:
    ranks = fault.spec.target.ranks
    pids = state.live_pids(ranks)
    t = time.monotonic_ns()
    detail = fault.injector.inject(Target(ranks=ranks, pids=pids))
    t_sent = time.monotonic_ns()
    fault.fired_t = t
    if getattr(fault.injector, "duration_s", None) is None:
        fault.undone = True  # one-shot: nothing to revert
    harness.emit("inject", t=t, t_sent=t_sent, fault=fault.index, kind=fault.spec.kind, ranks=list(ranks),
                 pids=pids, step=state.max_step, **detail)


def _undo(fault: ArmedFault, harness: EventWriter) -> None:
    t = time.monotonic_ns()
    fault.injector.undo()
    fault.undone = True
    harness.emit("fault_end", t=t, fault=fault.index, kind=fault.spec.kind)
