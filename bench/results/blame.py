"""Whom the stack blamed, and whether a detection was a false alarm: read from events.

ftbench knows which ranks it broke (the ``inject`` event's ``ranks``); the stack under
test names a culprit in its own records, which ftbench already logs as events: reinit's
``isolate`` (the members its next world leaves out), torchrun's failure record (the
agent's ``detect`` carries the rank torchrun reports as the root cause), torchft's
lighthouse (the replicas a new quorum dropped), NVRx's rank monitors and terminated
ranks. Each strategy declares where (:attr:`bench.strategies.Strategy.blame`), so this
module names no strategy.

A *false alarm* is a detection of a fault that ended within the stack's tolerance (its
smallest detection timeout, recorded by the harness in ``trial_start``): a stall, or a
straggler's per-collective delay, shorter than the timeout should have been absorbed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bench.procs.events import Event


@dataclass(frozen=True, slots=True)
class BlameSpec:
    """``event@src:field``: the field of an event that holds the ranks a stack blamed."""

    event: str
    src: str
    field: str

    @classmethod
    def parse(cls, spec: str) -> BlameSpec:
        head, sep, field = spec.partition(":")
        if not sep or not field:
            raise ValueError(f"blame spec {spec!r}: expected event[@src]:field")
        event, _, src = head.partition("@")
        return cls(event=event, src=src, field=field)

    def matches(self, e: Event) -> bool:
        return e["event"] == self.event and (not self.src or e.get("src") == self.src) and self.field in e


@dataclass(frozen=True, slots=True)
class Attribution:
    blamed: frozenset[int]
    """Every rank the stack named after the injection (empty: it named no one)."""
    t_first: int | None
    """When it first named one (CLOCK_MONOTONIC ns), or None."""


def named_ranks(value: object) -> set[int]:
    """The ranks a blame field names: a rank, a list of ranks, or a mapping keyed by rank
    (torchrun's ``failures``). Anything else (None, text) names no one."""
    if isinstance(value, bool) or value is None:
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, str):
        return {int(value)} if value.lstrip("-").isdigit() else set()
    if isinstance(value, dict):
        return set().union(*(named_ranks(k) for k in value)) if value else set()
    if isinstance(value, (list, tuple)):
        return set().union(*(named_ranks(v) for v in value)) if value else set()
    return set()


def attribution(window: Iterable[Event], specs: Sequence[str], victims: set[int]) -> Attribution:
    """Whom the stack blamed in a fault's window. The victims' own records do not count
    (a stalled rank that wakes up and accuses its peers is not the stack attributing),
    nor does naming a rank that had finished training: a quorum that leaves out replicas
    gone because the job is over (torchft, once a stalled replica wakes up alone) accuses
    no one."""
    parsed = [BlameSpec.parse(s) for s in specs]
    blamed: set[int] = set()
    finished: set[int] = set()
    t_first: int | None = None
    for e in sorted(window, key=lambda e: int(e["t"])):
        if e["event"] == "train_end" and e.get("src") == "rank":
            finished.add(int(e.get("rank", -1)))
        if e.get("src") == "rank" and int(e.get("rank", -1)) in victims:
            continue
        for spec in parsed:
            if spec.matches(e):
                named = named_ranks(e[spec.field]) - finished
                if named:
                    blamed |= named
                    t_first = e["t"] if t_first is None else min(t_first, e["t"])
    return Attribution(blamed=frozenset(blamed), t_first=t_first)


def blame_correct(att: Attribution, victims: set[int]) -> float:
    """1.0 when the blamed set is exactly the victims, 0.0 when not, NaN when nobody
    was named (or the fault hit no rank: a component)."""
    if not att.blamed or not victims:
        return math.nan
    return 1.0 if set(att.blamed) == victims else 0.0


def hold_s(inj: Event) -> float | None:
    """How long the fault held its victims up, as a timeout sees it: a straggler's
    per-collective ``delay_s``, else the fault's ``duration_s`` (a stall, a hang); None
    for a fault with no end (a kill)."""
    for key in ("delay_s", "duration_s"):
        value = inj.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def tolerance_s(events: Sequence[Event]) -> float | None:
    """The stack's smallest detection timeout, as the harness recorded it in ``trial_start``."""
    for e in events:
        if e["event"] == "trial_start":
            value = e.get("tolerance_s")
            return float(value) if isinstance(value, (int, float)) and value > 0 else None
    return None


def false_alarm(inj: Event, tolerance: float | None) -> str:
    """Why a detection of ``inj`` is a false alarm ("" if it is not, or cannot be told)."""
    hold = hold_s(inj)
    if hold is None or tolerance is None or not hold < tolerance:
        return ""
    return (
        f"declared a failure of a {hold:g} s {inj.get('kind', 'fault')} that ended within the stack's "
        f"{tolerance:g} s timeout"
    )
