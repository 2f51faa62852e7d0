"""Faults that act inside a rank, through a hook around its collectives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bench.scenario.config import bounded
from bench.scenario.faults import FAULTS, DurationParams, Family, FaultKind, NoParams


@dataclass(frozen=True, kw_only=True, slots=True)
class StragglerParams:
    delay_s: float = bounded(gt=0)
    """Sleep before every collective of the target..."""
    duration_s: float = bounded(gt=0)
    """...for this long."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BitFlipParams:
    bit: int = bounded(27, ge=0, le=31)
    """Bit of the float32 word to flip (23-30: exponent, 31: sign, 0-22: mantissa)."""
    elements: int = bounded(1, ge=1)
    """How many elements of the bucket get the flip (seeded choice)."""
    when: Literal["after_reduce", "before_reduce"] = "after_reduce"
    """``after_reduce``: the reduced gradient is wrong on the target only, so replicas
    diverge (a memory or link error). ``before_reduce``: the target's contribution is
    wrong, so every replica applies the same wrong gradient (a compute error)."""


def _register(name: str, params: type, hook: str, family: Family, summary: str) -> None:
    FAULTS.register(
        FaultKind(
            name=name, params=params, impl=f"injectors.rankside:{hook}", family=family, rank_side=True, summary=summary
        )
    )


_register("hang", DurationParams, "Hang", "hang", "hang inside the target's next collective for duration_s")
_register("gil", DurationParams, "HoldGIL", "hang", "hold the GIL in the target for duration_s (deadlock)")
_register(
    "straggler", StragglerParams, "Straggler", "slow", "delay every collective of the target by delay_s for duration_s"
)
_register("raise", NoParams, "Raise", "collective", "raise inside the target's next collective")
_register("abort", NoParams, "Abort", "collective", "abort the target's process group (communicator)")
_register("bitflip", BitFlipParams, "BitFlip", "data", "flip bits of a gradient bucket on the target (SDC)")
