"""Whether two measurements of one figure agree within a tolerance, decided by an interval.

``ftbench calibrate`` measures a figure two ways (through ftbench, and through a
reference with none of ftbench's code) and asks whether they agree within a tolerance.
The difference of the medians alone cannot say: with few trials its value is where the
noise put it, and a verdict on it fails a CI job at random (issue 46: at five trials two
rows came out "out of bounds" with 95 % intervals that held 0, and rows as wide passed
because their medians landed inside). So the interval decides, as ``ftbench gate``
decides on a test and not on a median:

- **agrees**: the whole interval of the difference lies within +-tolerance;
- **disagrees**: the whole interval lies beyond it (above +tolerance or below -tolerance);
- **cannot tell**: anything else, or an interval not worth deciding on (fewer than
  :data:`MIN_VALUES` values a side, or none).

A row that cannot tell says how many trials would likely decide it, from the spread its
interval shows. The exit status follows the gate's rule (:func:`bench.results.gate.status_of`):
0 when all agree, 1 when any disagrees, 2 when none disagrees but some cannot tell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bench.results.gate import INSUFFICIENT, PASS, REGRESSION, status_of

Verdict = Literal["agrees", "disagrees", "cannot tell"]
AGREES: Verdict = "agrees"
DISAGREES: Verdict = "disagrees"
CANNOT_TELL: Verdict = "cannot tell"

MIN_VALUES = 5
"""The fewest values a side whose interval a verdict may rest on. A percentile bootstrap
interval of a median is never wider than the sample's range, and the range of n values
covers the true median with probability 1 - 2^(1-n): 75 % at 3, 88 % at 4, 94 % at 5,
97 % at 6. From 5 the interval holds about the 95 % it claims; below, a verdict on it
would be the noise's."""

MAX_TRIALS = 100
"""Beyond this many trials a projection is not worth printing: the difference sits (nearly)
on the tolerance's edge, where more trials narrow the interval without moving it off the
edge. 100 rounds of the default calibration set are a night's run on two cores (about
4 min a round)."""

BY_STATUS: dict[int, Verdict] = {PASS: AGREES, REGRESSION: DISAGREES, INSUFFICIENT: CANNOT_TELL}
"""The whole run's verdict by its exit status, in the rows' words (for run.json)."""
WORDS = {PASS: "agrees", REGRESSION: "DISAGREES", INSUFFICIENT: "CANNOT TELL YET"}
"""The same, printed in the shape of the gate's last line (pass, REGRESSION, INSUFFICIENT
DATA)."""


@dataclass(frozen=True, slots=True)
class Agreement:
    verdict: Verdict
    trials: int | None = None
    """For ``cannot tell``: about how many trials a side would likely decide it at the
    spread seen (a projection, not a promise); None where no spread was seen, or where
    more than :data:`MAX_TRIALS` would be needed."""
    on_edge: bool = False
    """The projection passed :data:`MAX_TRIALS`: the difference sits on the edge."""

    def note(self) -> str:
        """What a reader of a ``cannot tell`` row should know ("" for a decided row)."""
        if self.verdict != CANNOT_TELL:
            return ""
        if self.trials is not None:
            return f"~{self.trials} trials would tell"
        if self.on_edge:
            return f"on the tolerance's edge: not within {MAX_TRIALS} trials"
        return f"fewer than {MIN_VALUES} values a side"


def judge(diff: float, low: float, high: float, tolerance: float, n: int) -> Agreement:
    """The verdict on a difference ``diff`` with interval [``low``, ``high``] against
    +-``tolerance``, from ``n`` values a side (the smaller side's count)."""
    spread_seen = n >= 2 and not any(math.isnan(v) for v in (diff, low, high))
    if not spread_seen:
        return Agreement(CANNOT_TELL)
    if n >= MIN_VALUES:
        if -tolerance <= low and high <= tolerance:
            return Agreement(AGREES)
        if low > tolerance or high < -tolerance:
            return Agreement(DISAGREES)
    trials = _trials_to_decide(n, diff, low, high, tolerance)
    return Agreement(CANNOT_TELL, trials=trials, on_edge=trials is None)


def _trials_to_decide(n: int, diff: float, low: float, high: float, tolerance: float) -> int | None:
    """About how many trials a side would bring the interval wholly inside or wholly
    outside the tolerance, on the side of the edge the difference is now. An interval's
    reach on each side of the difference narrows about as one over the square root of
    the trials; each reach that must fit into the room between the difference and an
    edge sets how much it has to narrow. None past :data:`MAX_TRIALS`."""
    above, below = max(high - diff, 0.0), max(diff - low, 0.0)
    if abs(diff) <= tolerance:
        needs = [(above, tolerance - diff), (below, diff + tolerance)]
    elif diff > tolerance:
        needs = [(below, diff - tolerance)]
    else:
        needs = [(above, -tolerance - diff)]
    shrink = min((room / reach for reach, room in needs if reach > 0), default=math.inf)
    if shrink <= 0:
        return None
    trials = max(MIN_VALUES, n + 1, math.ceil(n / shrink**2))
    return trials if trials <= MAX_TRIALS else None


def status(verdicts: Sequence[str]) -> int:
    """The run's exit status, by the gate's rule: 0 all agree, 1 any disagrees, 2 none
    disagrees but some cannot tell (or there was nothing to judge)."""
    return status_of(failing=DISAGREES in verdicts, insufficient=CANNOT_TELL in verdicts, decided=bool(verdicts))
