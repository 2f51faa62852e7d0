"""The report's table of checkpoint designs: what each save held training for, what ran on
in the background, what a recovery's restore took, the bytes, and the steps replayed.

The per-fault tables already carry ``restore_s`` and ``steps_lost``; the save figures are
per trial (``checkpoint_*``), which the summary leaves out, so a run whose stacks
checkpoint gets them side by side here, one row per point, with the design its
``checkpoint`` knob named.
"""

from __future__ import annotations

import pandas as pd

from bench.report.blocks import Report
from bench.report.series import Series
from bench.report.tables import reduced_cell, seconds, size

COLUMNS = (
    ("blocked per save", "checkpoint_blocked_s", seconds),
    ("background per save", "checkpoint_background_s", seconds),
    ("restore", "restore_s", seconds),
    ("bytes per save", "checkpoint_bytes", size),
    ("steps lost", "steps_lost", lambda v: f"{v:g}"),
)


def section(rep: Report, series: list[Series]) -> None:
    """Add the table when some point saved checkpoints."""
    saving = [s for s in series if s.values("checkpoint_blocked_s")]
    if not saving:
        return
    rep.add("h2", "Checkpoint designs")
    rep.add(
        "p",
        "Medians over trials. `blocked per save`: how long a save held the training loop (the slowest "
        "rank's); `background per save`: how long an asynchronous save ran on after the loop went on "
        "(`-` for synchronous designs); `restore`: the recovery's longest state load; `bytes per save`: "
        "what the last save wrote, every rank together (copies on peers included); `steps lost`: "
        "committed steps computed again. docs/strategies.md describes the designs.",
    )
    rep.add("table", table=table(saving))


def table(series: list[Series]) -> pd.DataFrame:
    rows = []
    for s in series:
        recovery = s.run.point_config(s.point_hash).get("recovery", {})
        row: dict[str, str] = {
            "point": s.name,
            "strategy": s.strategy,
            "design": str(recovery.get("params", {}).get("checkpoint", "-")),
        }
        for name, column, fmt in COLUMNS:
            row[name] = reduced_cell(s.values(column), fmt)
        rows.append(row)
    return pd.DataFrame(rows)
