"""A failure mix: one arrival process whose every arrival picks a fault entry by share.

Published failure tables for large jobs (docs/failure-mix.md) give the rate of
interruptions and how they divide among causes. A scenario writes that as
``[[faults]]`` entries whose triggers carry a ``share``: together they are one chaos
schedule, whose arrivals come at exponentially distributed intervals of mean
``trigger.mtbf_s`` (the same in every member), ``trigger.count`` of them in all, and
each arrival is one firing of the entry drawn with probability ``share / sum of
shares`` (shares need not add up to 100: they are normalised, and the normalised table
is what ``ftbench validate`` prints and the report shows).

The whole schedule (when, and which entry) is drawn before the trial from the seed
(``measure.seed``) and the trial number alone, nothing of the stack, so every point of
a sweep over ``recovery.strategy`` meets the same faults at the same moments (counted
from the first step). Only whom a firing hits is drawn when it fires, from the live
ranks, with the entry's own seeded generator, as for any other trigger.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.scenario.config import ConfigError
from bench.scenario.faults import FaultSpec


@dataclass(frozen=True, slots=True)
class Member:
    """One entry of a mix: its index in ``[[faults]]``, its kind and its share."""

    index: int
    kind: str
    share: float


@dataclass(frozen=True, slots=True)
class Mix:
    """The arrival process and the entries it picks from."""

    mtbf_s: float
    count: int
    members: tuple[Member, ...]

    def normalised(self) -> dict[int, float]:
        """Fault index -> its share of the arrivals (adds up to 1)."""
        total = sum(m.share for m in self.members)
        return {m.index: m.share / total for m in self.members}

    def draw(self, seed: int, trial: int) -> dict[int, list[float]]:
        """Fault index -> its firing times (seconds after the first step), for one trial.

        One generator seeded by the seed and the trial draws every interval and every
        pick, in order, so the schedule depends on nothing else (not the stack, not
        which firings were skipped)."""
        rng = random.Random(f"{seed}:{trial}:mix")
        indices = [m.index for m in self.members]
        weights = [m.share for m in self.members]
        out: dict[int, list[float]] = {i: [] for i in indices}
        t = 0.0
        for _ in range(self.count):
            t += rng.expovariate(1.0 / self.mtbf_s)
            out[rng.choices(indices, weights=weights)[0]].append(t)
        return out

    def text(self) -> str:
        """The normalised table in one line (what ``ftbench validate`` prints)."""
        shares = self.normalised()
        parts = ", ".join(f"faults.{m.index} {m.kind} {100.0 * shares[m.index]:.1f} %" for m in self.members)
        return f"mix of {self.count} arrivals, mtbf {self.mtbf_s:g} s: {parts}"


def of(faults: Sequence[FaultSpec]) -> Mix | None:
    """The scenario's mix (its entries with a ``trigger.share``), None without one.
    Assumes :func:`check` passed."""
    members = tuple(
        Member(index=i, kind=f.kind, share=float(f.trigger.share))
        for i, f in enumerate(faults)
        if f.trigger.share is not None
    )
    if not members:
        return None
    first = faults[members[0].index].trigger
    assert first.mtbf_s is not None
    return Mix(mtbf_s=first.mtbf_s, count=first.count, members=members)


def from_config(faults: Sequence[Mapping[str, Any]]) -> Mix | None:
    """The mix of a point as run.json records its faults (dicts), for readers of a run."""
    members = tuple(
        Member(index=i, kind=str(f.get("kind", "")), share=float(f["trigger"]["share"]))
        for i, f in enumerate(faults)
        if isinstance(f.get("trigger"), Mapping) and f["trigger"].get("share") is not None
    )
    if not members:
        return None
    first = faults[members[0].index]["trigger"]
    return Mix(mtbf_s=float(first["mtbf_s"]), count=int(first.get("count", 1)), members=members)


def check(faults: Sequence[FaultSpec], *, file: str) -> None:
    """Every member of the mix shares one arrival process: ``mtbf_s`` (the only trigger
    a share goes with), ``count`` and ``jitter`` the same in each."""
    members = [(i, f) for i, f in enumerate(faults) if f.trigger.share is not None]
    for i, f in members:
        if f.trigger.mtbf_s is None:
            raise ConfigError(
                file,
                f"faults.{i}.trigger.share",
                "a share only with trigger.mtbf_s (the mix's arrival process: mean seconds between arrivals)",
                f.trigger.share,
            )
    if not members:
        return
    i0, first = members[0]
    for i, f in members[1:]:
        for key in ("mtbf_s", "count", "jitter"):
            mine, theirs = getattr(f.trigger, key), getattr(first.trigger, key)
            if mine != theirs:
                raise ConfigError(
                    file,
                    f"faults.{i}.trigger.{key}",
                    f"{theirs!r} as in faults.{i0}: every entry with a share is one arrival process "
                    "(mtbf_s, count and jitter are the mix's)",
                    mine,
                )
