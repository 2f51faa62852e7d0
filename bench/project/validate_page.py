"""Showing the projection check (:mod:`bench.project.validate`): measured beside
predicted per point, each part's share of wall time in the model and in the trial, and
the notes that say which term is off; as tables and as ``validate.md``."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from bench.project.validate import MEASURED_PARTS, SLOW, Check
from bench.report.tables import markdown
from bench.results.reader import Run


def table(checks: list[Check]) -> pd.DataFrame:
    """Measured beside predicted, one row per point."""
    rows = []
    for c in checks:
        rows.append(
            {
                "strategy": c.strategy,
                "wall": f"{c.wall_s / 60:.1f} min" if not math.isnan(c.wall_s) else "-",
                "faults": f"{c.injected} ({c.recovered} recovered, {c.skipped} skipped)",
                "MTBF": f"{1 / c.rate_per_s:.3g} s" if c.rate_per_s > 0 else "-",
                "L": f"{c.lost_s:.3g} s" if not math.isnan(c.lost_s) else "-",
                "measured E": _pct(c.measured),
                "predicted E": _pct(c.predicted),
                "error (points)": _pts(c.error),
                "note": c.reason or "; ".join(c.notes[:1]),
            }
        )
    return pd.DataFrame(rows)


def _pct(v: tuple[float, float, float]) -> str:
    e, lo, hi = v
    if math.isnan(e):
        return "-"
    return f"{100 * e:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]" if not math.isnan(lo) else f"{100 * e:.1f} %"


def _pts(v: tuple[float, float, float]) -> str:
    e, lo, hi = v
    if math.isnan(e):
        return "-"
    return f"{100 * e:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]" if not math.isnan(lo) else f"{100 * e:+.1f}"


def parts_table(checks: list[Check]) -> pd.DataFrame:
    """Each part's share of wall time: the model's against the trial's."""
    rows = []
    for c in checks:
        if c.reason:
            continue
        for part in (*MEASURED_PARTS, SLOW):
            m, p = c.measured_shares.get(part, math.nan), c.model_shares.get(part, 0.0)
            rows.append(
                {
                    "strategy": c.strategy,
                    "part": part,
                    "model": f"{100 * p:.1f} %",
                    "measured": f"{100 * m:.1f} %",
                    "difference (points)": f"{100 * (m - p):+.1f}",
                }
            )
    return pd.DataFrame(rows)


def write(checks: list[Check], run: Run, out: Path) -> Path:
    """``validate.md`` in ``out``: the comparison, the parts and the notes per point."""
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# Effective training time: measured against predicted ({run.tag})",
        "",
        "Measured: each distinct step once at the fault-free step time, scaled by the world that made it, over "
        "the wall time from the first step to the job's end. Predicted: E = c / (1 + lambda L) with this run's "
        "injections per second of wall time (lambda), mean loss per recovered fault (L: detection, recovery, "
        "replay, degraded running) and its checkpoint write and interval (c). Intervals: 5-95 % of a joint "
        "bootstrap over the trials' cycles (injection to injection). Method: docs/project.md.",
        "",
        markdown(table(checks)),
    ]
    parts = parts_table(checks)
    if not parts.empty:
        lines += ["## Where the wall time went", "", markdown(parts)]
    lines += ["## Notes", ""]
    for c in checks:
        lines.append(f"- **{c.strategy}**: " + (c.reason or "; ".join(c.notes)))
        if c.tau_s is None and not c.reason:
            lines.append("  (no checkpoints written: c = 1)")
    page = out / "validate.md"
    page.write_text("\n".join(lines) + "\n")
    return page
