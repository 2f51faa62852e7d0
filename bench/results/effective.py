"""The effective training time of a chaos trial, measured from its events alone.

``ftbench project`` predicts the share of wall time a job spends on useful work; this
is the same share as a trial achieved it, counted the way the model counts (docs/project.md):

- useful work: each distinct step once (a step computed again after a rollback is a
  replay, lost time), worth the fault-free step time; a step of a smaller world is
  worth its share of the world (three ranks of four: three quarters) of the time it
  took, and the rest of that time is degraded running. On a cluster every rank has its
  accelerator and a smaller world steps as fast as the full one; here ranks share a
  few cores and fewer ranks step faster, which valued at the full world's step time
  would count as more work than the full world does;
- wall time: from the start of the first step to the end of the job's last rank, so
  checkpoint writes, detection, recovery and replays are all in it;
- the fault-free step time: the mean full-world step (past warmup, a world's first
  step aside; a step takes from the previous step's end to its own) in the same cycle, the whole
  trial's where a cycle has none. It is the stack's own, so its fault-free tax is not
  a loss here. It is the mean, not the median: step times on a shared machine have a
  long tail (stalls of a few hundred milliseconds from other load), which a trial
  without faults pays too, so with the median a fault-free trial would measure well
  under 1. And it is each cycle's, not the steps' before the first injection, because
  over a long trial the step time drifts with the machine's load, which is no
  failure's cost (``slowdown`` says how far it drifted).

The trial is cut into cycles at each injection (cycle 0 runs up to the first). Each
distinct step's work is booked to the cycle in which its last completion ended, so
cycles are what a bootstrap resamples: the ratio of summed work to summed wall time
over resampled cycles gives the interval of the measured fraction, and a cycle carries
the fault that opened it, so the prediction can be resampled with it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from bench.procs.events import Event
from bench.results.facts import WorldStep, seconds, trial_facts, world_steps


@dataclass(frozen=True, slots=True)
class Cycle:
    """Wall time from one injection to the next (or from the start, or to the end)."""

    start_ns: int
    end_ns: int
    useful_s: float
    """Fault-free seconds of work of the distinct steps whose last completion ended here."""
    fault: int | None
    """Which injection (0-based, in time order) opened it; None for the first cycle."""
    degraded_s: float
    """Wall seconds the steps ended here ran short of ranks, weighted by the share
    missing (a step of three ranks of four that took 1 s counts 0.25 s): what degraded
    running cost in this cycle, as the model counts it."""
    slow_s: float = 0.0
    """Wall seconds the full world's steps ended here took beyond the fault-free step
    time (negative where they were faster): time the model, whose steps between
    failures run at the fault-free speed, does not have."""

    @property
    def wall_s(self) -> float:
        return seconds(self.end_ns - self.start_ns)


@dataclass(frozen=True, slots=True)
class Effective:
    """A trial's measured share of wall time spent on useful work, and its parts."""

    ff_step_s: float
    """The whole trial's mean full-world step (each cycle's own weighs its steps)."""
    world: int
    steps_done: int
    cycles: tuple[Cycle, ...]
    work: tuple[tuple[int, float], ...]
    """(end stamp, worth in seconds) of every distinct step, in time order: where in the
    trial the useful work was done (during a recovery, by survivors that train on)."""
    injects_ns: tuple[int, ...]
    """Monotonic stamps of the injections, in time order (the cycles' boundaries)."""
    checkpoint_s: float
    """Seconds the trial's checkpoint writes held training (0 without any)."""
    saves: int
    """Checkpoint saves that held training."""
    save_gaps_s: tuple[float, ...] = field(default=())
    """Seconds from the end of one save to the next within one world generation: the
    compute between writes (tau) as the trial ran it."""
    pre_step_s: float = math.nan
    """Median full-world step before the first injection."""
    late_step_s: float = math.nan
    """Median full-world step after the first injection (NaN without one): beside
    ``pre_step_s``, whether steps ran slower once faults began, the world's size aside."""

    @property
    def wall_s(self) -> float:
        return sum(c.wall_s for c in self.cycles)

    @property
    def useful_s(self) -> float:
        return sum(c.useful_s for c in self.cycles)

    @property
    def value(self) -> float:
        wall = self.wall_s
        return self.useful_s / wall if wall > 0 else math.nan

    @property
    def degraded_s(self) -> float:
        return sum(c.degraded_s for c in self.cycles)

    @property
    def slow_s(self) -> float:
        return sum(c.slow_s for c in self.cycles)

    @property
    def slowdown(self) -> float:
        """Median full-world step time after the first injection over the one before it."""
        return self.late_step_s / self.pre_step_s if self.pre_step_s > 0 else math.nan


def measure(events: Sequence[Event], *, steps: int, warmup_steps: int, world: int) -> Effective | None:
    """The trial's effective training time; None when it never trained or has no
    fault-free step time (no full-world step past warmup)."""
    facts = trial_facts(events, steps=steps, warmup_steps=warmup_steps)
    table = world_steps(events)
    # What a step took: from the previous step's end to its own, as the world saw them
    # (each rank's step_s overlaps its neighbours' waits: their sum outruns the wall);
    # a world's first step, with no previous one, what its slowest rank measured.
    took: dict[tuple[int, int], float] = {}
    for e in events:
        if e["event"] == "step_end":
            key = (int(e.get("gen", 0)), int(e["step"]))
            took[key] = max(took.get(key, 0.0), float(e.get("step_s", 0.0)))
    for (gen, step), ws in table.items():
        prev = table.get((gen, step - 1))
        if prev is not None:
            took[(gen, step)] = seconds(ws.t_end - prev.t_end)
    # A world's first step carries its start (connections, first allocations): it is in
    # the recovery that made the world (ttr ends with it), neither a fault-free step nor
    # a slow one.
    opening = {min(k for k in took if k[0] == gen) for gen in {k[0] for k in took}}
    # (end, seconds) of every full-world step past warmup, a world's first aside.
    full = sorted(
        (ws.t_end, took[key])
        for key, ws in table.items()
        if ws.step > warmup_steps and (ws.world_size or world) >= world and key not in opening
    )
    if facts.train_start_ns is None or facts.train_end_ns is None or not full or world <= 0:
        return None
    ff = statistics.fmean(v for _, v in full)
    start, end = facts.train_start_ns, facts.train_end_ns
    injects = sorted(int(e["t"]) for e in events if e["event"] == "inject" and start <= int(e["t"]) < end)
    last: dict[int, WorldStep] = {}
    for ws in table.values():
        kept = last.get(ws.step)
        if kept is None or ws.t_end > kept.t_end:
            last[ws.step] = ws
    bounds = [start, *injects, end]
    # The fault-free step time where each cycle ran: the machine's load drifts over a
    # long trial, and a step is worth what a full world's step took at that moment.
    local: list[list[float]] = [[] for _ in bounds[1:]]
    for t, v in full:
        local[_cycle_of(bounds, t)].append(v)
    ffs = [statistics.fmean(v) if v else ff for v in local]
    useful = [0.0] * (len(bounds) - 1)
    lost = [0.0] * (len(bounds) - 1)
    slow = [0.0] * (len(bounds) - 1)
    done: list[tuple[int, float]] = []
    for ws in last.values():
        share = min(1.0, (ws.world_size or world) / world)
        i = _cycle_of(bounds, ws.t_end)
        spent = took.get((ws.gen, ws.step), ffs[i])
        worth = share * spent if share < 1.0 else ffs[i]
        useful[i] += worth
        done.append((ws.t_end, worth))
        if share < 1.0:
            lost[i] += (1.0 - share) * spent
        else:
            slow[i] += 0.0 if (ws.gen, ws.step) in opening else spent - ffs[i]
    cycles = tuple(
        Cycle(start_ns=a, end_ns=b, useful_s=u, fault=None if i == 0 else i - 1, degraded_s=d, slow_s=w)
        for i, (a, b, u, d, w) in enumerate(zip(bounds, bounds[1:], useful, lost, slow, strict=False))
    )
    held, gaps = _saves(events)
    first = injects[0] if injects else end
    pre = [v for t, v in full if t < first]
    late = [v for t, v in full if t > first]
    return Effective(
        ff_step_s=ff,
        world=world,
        steps_done=len(last),
        work=tuple(sorted(done)),
        cycles=cycles,
        injects_ns=tuple(injects),
        checkpoint_s=sum(held),
        saves=len(held),
        save_gaps_s=tuple(gaps),
        pre_step_s=statistics.median(pre) if pre else math.nan,
        late_step_s=statistics.median(late) if late else math.nan,
    )


def _cycle_of(bounds: list[int], t: int) -> int:
    """Index of the cycle [bounds[i], bounds[i + 1]) holding t (the last holds its end)."""
    lo, hi = 0, len(bounds) - 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if bounds[mid] <= t:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _saves(events: Sequence[Event]) -> tuple[list[float], list[float]]:
    """Each save's hold on training (the slowest rank's, as
    :mod:`bench.results.checkpoints` counts it) and the gaps between consecutive saves
    of one generation (end of one to the start of the next)."""
    held: dict[tuple[int, int], float] = {}
    ended: dict[tuple[int, int], int] = {}
    for e in events:
        if e["event"] != "checkpoint":
            continue
        key = (int(e.get("gen", 0)), int(e["step"]))
        hold = float(e["blocked_s"] if "blocked_s" in e else e["save_s"])
        held[key] = max(held.get(key, hold), hold)
        ended[key] = max(ended.get(key, int(e["t"])), int(e["t"]))
    gaps: list[float] = []
    order = sorted(ended)
    for prev, nxt in pairwise(order):
        if prev[0] == nxt[0]:  # the same generation: no restart in between
            gaps.append(max(0.0, seconds(ended[nxt] - ended[prev]) - held[nxt]))
    return list(held.values()), gaps
