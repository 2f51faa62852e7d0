"""The effective training time of a chaos trial, measured from its events alone.

``ftbench project`` predicts the share of wall time a job spends on useful work; this
is the same share as a trial achieved it, counted the way the model counts (docs/project.md):

- useful work: each distinct step once (a step computed again after a rollback is a
  replay, lost time), worth the fault-free step time scaled by the world that made it
  over the world the trial started with (a step of three ranks of four did three
  quarters of the work: degraded running);
- wall time: from the start of the first step to the end of the job's last rank, so
  checkpoint writes, detection, recovery and replays are all in it;
- the fault-free step time: the median step before the first injection, past warmup
  (the stack's own, so its fault-free tax is not a loss here).

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

    @property
    def wall_s(self) -> float:
        return seconds(self.end_ns - self.start_ns)


@dataclass(frozen=True, slots=True)
class Effective:
    """A trial's measured share of wall time spent on useful work, and its parts."""

    ff_step_s: float
    world: int
    steps_done: int
    cycles: tuple[Cycle, ...]
    injects_ns: tuple[int, ...]
    """Monotonic stamps of the injections, in time order (the cycles' boundaries)."""
    checkpoint_s: float
    """Seconds the trial's checkpoint writes held training (0 without any)."""
    saves: int
    """Checkpoint saves that held training."""
    save_gaps_s: tuple[float, ...] = field(default=())
    """Seconds from the end of one save to the next within one world generation: the
    compute between writes (tau) as the trial ran it."""
    late_step_s: float = math.nan
    """Median step time of every rank of a full world after the first injection (NaN
    without one): beside ``ff_step_s``, whether steps ran slower once faults began, the
    world's size aside."""

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
    def slowdown(self) -> float:
        """Median step time after the first injection over the fault-free median."""
        return self.late_step_s / self.ff_step_s if self.ff_step_s > 0 else math.nan


def measure(events: Sequence[Event], *, steps: int, warmup_steps: int, world: int) -> Effective | None:
    """The trial's effective training time; None when it has no fault-free step time
    (no step before the first injection past warmup) or never trained."""
    facts = trial_facts(events, steps=steps, warmup_steps=warmup_steps)
    ff = facts.ff_step_s
    if facts.train_start_ns is None or facts.train_end_ns is None or math.isnan(ff) or world <= 0:
        return None
    start, end = facts.train_start_ns, facts.train_end_ns
    injects = sorted(int(e["t"]) for e in events if e["event"] == "inject" and start <= int(e["t"]) < end)
    last: dict[int, WorldStep] = {}
    for ws in world_steps(events).values():
        kept = last.get(ws.step)
        if kept is None or ws.t_end > kept.t_end:
            last[ws.step] = ws
    bounds = [start, *injects, end]
    useful = [0.0] * (len(bounds) - 1)
    lost = [0.0] * (len(bounds) - 1)
    took: dict[tuple[int, int], float] = {}
    for e in events:
        if e["event"] == "step_end":
            key = (int(e.get("gen", 0)), int(e["step"]))
            took[key] = max(took.get(key, 0.0), float(e.get("step_s", 0.0)))
    for ws in last.values():
        share = min(1.0, (ws.world_size or world) / world)
        i = _cycle_of(bounds, ws.t_end)
        useful[i] += share * ff
        lost[i] += (1.0 - share) * took.get((ws.gen, ws.step), ff)
    cycles = tuple(
        Cycle(start_ns=a, end_ns=b, useful_s=u, fault=None if i == 0 else i - 1, degraded_s=d)
        for i, (a, b, u, d) in enumerate(zip(bounds, bounds[1:], useful, lost, strict=False))
    )
    held, gaps = _saves(events)
    late = [
        float(e["step_s"])
        for e in events
        if e["event"] == "step_end" and injects and int(e["t"]) > injects[0] and int(e.get("world_size", 0)) >= world
    ]
    return Effective(
        ff_step_s=ff,
        world=world,
        steps_done=len(last),
        cycles=cycles,
        injects_ns=tuple(injects),
        checkpoint_s=sum(held),
        saves=len(held),
        save_gaps_s=tuple(gaps),
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
