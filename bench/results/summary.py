"""Per-point statistics, and the full list of a point's figures ``ftbench run --all-figures`` prints.

Only figures that exist are summarised: a NaN (a figure the outcome does not have) is
left out of the median, and the count ``n`` says how many trials a statistic rests on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from bench.scenario.figures import figure, is_figure, is_phase, outcomes_text

#: Trial-level figures summarised beside the per-fault ones (a checkpoint's cost is the
#: other side of restart's steps_lost).
SUMMARISED_TRIAL_FIGURES = (
    "checkpoint_s",
    "checkpoint_blocked_s",
    "checkpoint_background_s",
    # a stream-position mistake is the other side of loss_delta (workloads that report one)
    "tokens_skipped",
    "tokens_repeated",
    "tokens_per_s",
)


def _is_stat(col: str) -> bool:
    return is_figure(col) and (figure(col).per == "fault" or col in SUMMARISED_TRIAL_FIGURES)


def frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Rows as a table whose figure columns are numbers (NaN where a figure does not exist)."""
    df = pd.DataFrame(list(rows))
    for col in df.columns:
        if is_figure(col):
            df[col] = pd.to_numeric(df[col], errors="coerce")
    return df


def point_stats(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{point_hash: {label, strategy, outcomes, figures: {name: {n, median, min, max}}}}``
    over the fault trials (reference runs excluded)."""
    df = frame(rows)
    if df.empty:
        return {}
    if "reference" in df:
        df = df[~df["reference"].astype(bool)]
    stats: dict[str, dict[str, Any]] = {}
    figure_cols = [c for c in df.columns if _is_stat(c)]
    for point_hash, group in df.groupby("point_hash", sort=False):
        figures = {}
        for col in figure_cols:
            values = group[col].dropna()
            figures[col] = {
                "n": int(values.size),
                "median": float(values.median()) if values.size else None,
                "min": float(values.min()) if values.size else None,
                "max": float(values.max()) if values.size else None,
            }
        stats[str(point_hash)] = {
            "label": str(group["label"].iloc[0]),
            "strategy": str(group["strategy"].iloc[0]),
            "fault": ",".join(sorted(set(map(str, group["fault"])))),
            "trials": int(group["trial"].nunique()),
            "outcomes": {str(k): int(v) for k, v in group["outcome"].value_counts().items()},
            "figures": figures,
        }
    return stats


def format_point(stats: dict[str, Any], point_hash: str) -> str:
    """A small table of one point: figure, n, median, min, max (seconds unless a ratio)."""
    outcomes = outcomes_text(stats["outcomes"])
    lines = [
        f"{stats['label']}  [{stats['strategy']}, {stats['trials']} trials, point {point_hash[:12]}]",
        f"  outcomes: {outcomes}",
        f"  {'figure':<26}{'n':>3}{'median':>11}{'min':>11}{'max':>11}",
    ]
    for name, fig in stats["figures"].items():
        if fig["n"] == 0 and (is_phase(name) or name in SUMMARISED_TRIAL_FIGURES):
            continue
        lines.append(f"  {name:<26}{fig['n']:>3}{_num(fig['median'])}{_num(fig['min'])}{_num(fig['max'])}")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{'-':>11}"
    if value == 0 or 1e-3 <= abs(value) < 1e5:
        return f"{value:>11.4f}"
    return f"{value:>11.3e}"
