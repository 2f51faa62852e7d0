"""How the phases that move state grow with bytes: a straight line per stack and phase.

A recovery that moves state pays for it twice over: a fixed cost (a file to open, a
group to agree on, a rendezvous) and a cost per byte (serialising, copying, the wire).
Runs that sweep the state size (``workload.state_mb``, scenario ``state-scaling``) tell
the two apart: ordinary least squares of the phase's seconds against its bytes gives the
per-byte cost as seconds per GB and the fixed cost as the intercept. Its interval comes
from a seeded bootstrap over rows (a trial is the unit that was measured, and a shared
machine's noise is not normal), so the same run always reports the same interval.

Only what was measured is fitted: a row counts where both the time and the bytes exist,
and a line needs at least :data:`MIN_SIZES` distinct sizes and :data:`MIN_ROWS` rows;
with less, there is no fit rather than a line through one point.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from bench.results.reader import Run
from bench.results.stats import percentile
from bench.scenario.figures import phase_column

#: Bytes in the GB that ``s_per_gb`` is per (decimal, as ``state_mb`` is in 10^6 bytes).
GB = 1e9
MIN_SIZES = 2
MIN_ROWS = 3
RESAMPLES = 2000
LEVEL = 0.95

#: (phase, seconds column, bytes column). ``restore``: whatever a stack brackets with
#: restore_start/restore_end (a checkpoint load, reinit's peer broadcast, torchft's heal).
#: ``checkpoint_blocked``: per save, the time the loop was held, against what the save
#: wrote; ``checkpoint_background``: the same for what an asynchronous save left to the
#: background (the write itself). The strategy-declared phases that move or rebuild
#: state: ``phase_restore`` runs from the new group to the end of the load (so it adds
#: the wait for the slowest rank's load to the transfer itself), ``phase_build`` is a
#: replacement process building model and optimizer from scratch, which grows with the
#: state too, and ``phase_upload`` (GPU ranks) moving them to the device; all three are
#: fitted against the bytes the restore moved, the size of the state.
PHASES: tuple[tuple[str, str, str], ...] = (
    ("restore", "restore_s", "restore_bytes"),
    ("checkpoint_blocked", "checkpoint_blocked_s", "checkpoint_bytes"),
    ("checkpoint_background", "checkpoint_background_s", "checkpoint_bytes"),
    ("phase_restore", phase_column("restore"), "restore_bytes"),
    ("phase_build", phase_column("build"), "restore_bytes"),
    ("phase_upload", phase_column("upload"), "restore_bytes"),
)


@dataclass(frozen=True, slots=True)
class StateFit:
    """seconds = intercept_s + s_per_gb x bytes / 1e9, for one stack's phase."""

    strategy: str
    phase: str
    s_per_gb: float
    low: float
    """Bootstrap 95 % interval of ``s_per_gb``."""
    high: float
    intercept_s: float
    n: int
    """Rows the line was fitted on."""
    min_bytes: float
    max_bytes: float


def ols(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line; NaN slope when x does not vary."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return math.nan, my
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return slope, my - slope * mx


def bootstrap_slope(
    xs: Sequence[float], ys: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the slope over row resamples; a resample in which x does
    not vary has no slope and is drawn again (it says nothing about the slope)."""
    rng = random.Random(seed)
    rows = list(zip(xs, ys, strict=True))
    slopes: list[float] = []
    tries = 0
    while len(slopes) < resamples and tries < resamples * 10:
        tries += 1
        pick = rng.choices(rows, k=len(rows))
        slope, _ = ols([x for x, _ in pick], [y for _, y in pick])
        if not math.isnan(slope):
            slopes.append(slope)
    if not slopes:
        return math.nan, math.nan
    tail = (1 - level) / 2 * 100
    return percentile(slopes, tail), percentile(slopes, 100 - tail)


def fit(strategy: str, phase: str, xs: Sequence[float], ys: Sequence[float], seed: int = 0) -> StateFit | None:
    """The line through (bytes, seconds), or None with too few rows or sizes."""
    if len(xs) < MIN_ROWS or len(set(xs)) < MIN_SIZES:
        return None
    slope, intercept = ols(xs, ys)
    low, high = bootstrap_slope(xs, ys, seed=seed)
    return StateFit(
        strategy=strategy,
        phase=phase,
        s_per_gb=slope * GB,
        low=low * GB,
        high=high * GB,
        intercept_s=intercept,
        n=len(xs),
        min_bytes=min(xs),
        max_bytes=max(xs),
    )


def points(trials: pd.DataFrame, strategy: str, seconds: str, nbytes: str) -> tuple[list[float], list[float]]:
    """(bytes, seconds) of the strategy's rows where both exist and the bytes are > 0."""
    if trials.empty or seconds not in trials.columns or nbytes not in trials.columns:
        return [], []
    rows = trials[trials["strategy"] == strategy][[nbytes, seconds]].apply(pd.to_numeric, errors="coerce").dropna()
    rows = rows[rows[nbytes] > 0]
    return [float(v) for v in rows[nbytes]], [float(v) for v in rows[seconds]]


def fit_state_phases(trials: pd.DataFrame) -> list[StateFit]:
    """Every (strategy, phase) of :data:`PHASES` that the rows can fit, in the rows'
    strategy order; ``trials`` as :meth:`bench.results.reader.Run.measured` returns."""
    if trials.empty or "strategy" not in trials.columns:
        return []
    fits: list[StateFit] = []
    for strategy in dict.fromkeys(str(s) for s in trials["strategy"]):
        for phase, seconds, nbytes in PHASES:
            xs, ys = points(trials, strategy, seconds, nbytes)
            found = fit(strategy, phase, xs, ys)
            if found is not None:
                fits.append(found)
    return fits


def checkpoint_designs(run: Run) -> dict[str, str]:
    """point_hash -> the checkpoint design its stack's ``checkpoint`` knob named ("" for a
    stack without one)."""
    out = {}
    for p in run.points():
        params = run.point_config(p["point_hash"]).get("recovery", {}).get("params") or {}
        out[p["point_hash"]] = str(params.get("checkpoint", "")) if isinstance(params, dict) else ""
    return out


def by_design(trials: pd.DataFrame, designs: Mapping[str, str]) -> pd.DataFrame:
    """The rows with each strategy named with its checkpoint design (``restart (dcp)``)
    where the run's rows of that strategy saved with more than one design, so that each
    design gets lines of its own (a save's and a restore's cost per GB are the design's,
    not the stack's); other rows as they are."""
    if trials.empty or "strategy" not in trials.columns:
        return trials
    pairs = [(str(s), designs.get(str(h), "")) for s, h in zip(trials["strategy"], trials["point_hash"], strict=True)]
    seen: dict[str, set[str]] = {}
    for strategy, design in pairs:
        seen.setdefault(strategy, set()).add(design)
    named = [f"{s} ({d})" if d and len(seen[s]) > 1 else s for s, d in pairs]
    return trials.assign(strategy=named)


def varies(trials: pd.DataFrame) -> bool:
    """Whether a run's state bytes vary enough for any fit: the report's test for its
    state-size section."""
    return any(nbytes in trials.columns and trials[nbytes].dropna().nunique() >= MIN_SIZES for _, _, nbytes in PHASES)
