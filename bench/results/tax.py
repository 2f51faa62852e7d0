"""The fault-free tax of each recovery stack: what it costs on every step when nothing fails.

A ``resilience-tax`` run (no faults, ``measure.resources``, trials interleaved) holds one
point per stack on the same workload. Each stack is compared with plain DDP
(``failstop``) of the same configuration:

- **step time**: what the stack adds to a step, from the trials' median step times
  (``ff_step_s``). In an interleaved run (``measure.interleave``) trial k of every
  stack ran in the same round, so each stack's trial k is divided by failstop's trial k
  (a drift of the shared machine between rounds cancels) and the tax is the median of
  those paired ratios, with a bootstrap 95 % interval over rounds
  (:func:`bench.results.stats.bootstrap_median_ci`); otherwise it is the ratio of the
  two medians with an unpaired bootstrap interval
  (:func:`bench.results.stats.median_ratio_ci`);
- **wall time per step**: the same ratio of training wall time per step
  (``ff_step_s / goodput``), which also holds what happens between steps (checkpoint
  writes, a slow rank held up by another's);
- memory, bytes on the wire per step, processes and threads: the medians of the
  trials' figures, and the processes and threads the stack adds to failstop's.

Only trials that ran to their end (outcome ``completed``) count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from bench.procs.events import read_events
from bench.results import stats
from bench.results.reader import Run
from bench.results.resources import FIGURES as RESOURCES
from bench.results.resources import roles

BASELINE = "failstop"


@dataclass(frozen=True, slots=True)
class Tax:
    strategy: str
    label: str
    baseline: str
    """The label of the failstop point it is compared with."""
    n: int
    step_s: float
    """Median of the trials' median step times."""
    ratio: float
    low: float
    high: float
    wall_ratio: float
    wall_low: float
    wall_high: float
    paired: bool = False
    """The ratios are per interleaved round (trial k against failstop's trial k)."""
    medians: dict[str, float] = field(default_factory=dict)
    """Median of each resource figure (:mod:`bench.results.resources`) over the trials (NaN: not measured)."""
    helpers: dict[str, int] = field(default_factory=dict)
    """Processes by kind in the point's first completed trial (ranks included)."""

    @property
    def is_baseline(self) -> bool:
        return self.label == self.baseline


def strategy_tax(run: Run) -> list[Tax]:
    """One :class:`Tax` per fault-free point that has a failstop point to compare with,
    in the run's point order (the baseline itself included, ratio 1)."""
    df = run.measured()
    if df.empty:
        return []
    df = df[(df["fault"] == "none") & (df["outcome"] == "completed")]
    pts = run.points()
    base_of: dict[str, str] = {}
    for p in pts:
        if p["values"].get("recovery.strategy", _strategy(df, p["point_hash"])) == BASELINE:
            base_of[_others(p)] = p["point_hash"]
    out = []
    for p in pts:
        rows = df[df["point_hash"] == p["point_hash"]]
        base = base_of.get(_others(p))
        if rows.empty or base is None:
            continue
        base_rows = df[df["point_hash"] == base]
        if base_rows.empty:
            continue
        label = {q["point_hash"]: q["label"] for q in pts}
        out.append(_tax(run, p, rows, base_rows, label[base]))
    return out


def _tax(run: Run, point: dict[str, Any], rows: pd.DataFrame, base: pd.DataFrame, base_label: str) -> Tax:
    same = point["label"] == base_label
    pair = _interleaved(run) and _env(rows) == _env(base) == ""
    step = _ratio(rows, base, rows["ff_step_s"], base["ff_step_s"], pair=pair)
    wall = _ratio(rows, base, rows["ff_step_s"] / rows["goodput"], base["ff_step_s"] / base["goodput"], pair=pair)
    first = int(rows["trial"].min())
    return Tax(
        strategy=str(rows["strategy"].iloc[0]),
        label=point["label"],
        baseline=base_label,
        n=len(_values(rows["ff_step_s"])),
        step_s=stats.median(_values(rows["ff_step_s"])),
        ratio=1.0 if same else step[0],
        low=1.0 if same else step[1],
        high=1.0 if same else step[2],
        wall_ratio=1.0 if same else wall[0],
        wall_low=1.0 if same else wall[1],
        wall_high=1.0 if same else wall[2],
        paired=step[3],
        medians={k: stats.median(_values(rows[k])) if k in rows else math.nan for k in RESOURCES},
        helpers=roles(read_events(run.events_dir(point["point_hash"], first))),
    )


def _interleaved(run: Run) -> bool:
    """Whether the run ran trial k of every point in one round (``measure.interleave``)."""
    measure = run.info.get("scenario", {}).get("raw", {}).get("measure", {})
    return bool(measure.get("interleave")) if isinstance(measure, dict) else False


def _env(rows: pd.DataFrame) -> str:
    """The point's ``launch.env``: a point of another environment runs whole, in a child
    harness of its own, never in rounds."""
    return str(rows["env"].iloc[0]) if "env" in rows and not rows.empty else ""


def _ratio(
    rows: pd.DataFrame, base: pd.DataFrame, x: pd.Series, y: pd.Series, *, pair: bool
) -> tuple[float, float, float, bool]:
    """(ratio, low, high, paired): per round where the points ran in rounds and at least
    three rounds have both, else the ratio of the medians."""
    xs = {int(t): float(v) for t, v in zip(rows["trial"], x, strict=True) if not math.isnan(float(v))}
    ys = {int(t): float(v) for t, v in zip(base["trial"], y, strict=True) if not math.isnan(float(v)) and v > 0}
    common = sorted(set(xs) & set(ys))
    if pair and len(common) >= 3:
        ratios = [xs[t] / ys[t] for t in common]
        ci = stats.bootstrap_median_ci(ratios)
        return stats.median(ratios), ci.low, ci.high, True
    if not xs or not ys:
        return math.nan, math.nan, math.nan, False
    ci = stats.median_ratio_ci(list(xs.values()), list(ys.values()))
    return stats.median(list(xs.values())) / stats.median(list(ys.values())), ci.low, ci.high, False


def _values(col: pd.Series) -> list[float]:
    return stats.present(col.astype(float))


def _strategy(df: pd.DataFrame, point_hash: str) -> str:
    rows = df[df["point_hash"] == point_hash]
    return str(rows["strategy"].iloc[0]) if not rows.empty else ""


def _others(point: dict[str, Any]) -> str:
    """The point's sweep values but its strategy: the key a stack and its baseline share."""
    return repr(sorted((k, repr(v)) for k, v in point["values"].items() if k != "recovery.strategy"))
