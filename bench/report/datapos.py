"""The report's table of the data position and throughput, for workloads that report
their position in the token stream (the transformer).

``tokens_skipped``, ``tokens_repeated`` and ``tokens_per_s`` are per-trial figures,
which the summary table leaves out; a recovery that restored the weights but lost its
place in the stream shows here beside ``loss_delta``, one row per point.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from bench.report.blocks import Report
from bench.report.series import Series
from bench.report.tables import reduced_cell
from bench.results.stats import median

COLUMNS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("tokens/s (fault-free)", "tokens_per_s", lambda v: f"{v:,.0f}"),
    ("tokens skipped", "tokens_skipped", lambda v: f"{v:,.0f}"),
    ("tokens repeated", "tokens_repeated", lambda v: f"{v:,.0f}"),
    ("loss_delta", "loss_delta", lambda v: f"{v:.3g}"),
)


def section(rep: Report, series: list[Series]) -> None:
    """Add the table when some point's workload reported its data position."""
    reporting = [s for s in series if s.values("tokens_per_s")]
    if not reporting:
        return
    rep.add("h2", "Data position and throughput")
    rep.add(
        "p",
        "Medians over trials (the maximum for tokens skipped and repeated: one trial that lost its place "
        "is the finding). A run's lineage is the last execution of each step; a batch of the token stream "
        "it read twice is repeated, a batch below the furthest one read that it never read is skipped. "
        "`tokens/s`: a global batch's tokens over the median fault-free step time. docs/workloads.md.",
    )
    rep.add("table", table=table(reporting))


def table(series: list[Series]) -> pd.DataFrame:
    rows = []
    for s in series:
        row: dict[str, str] = {"point": s.name, "strategy": s.strategy}
        for name, column, fmt in COLUMNS:
            worst = column in ("tokens_skipped", "tokens_repeated")
            row[name] = reduced_cell(s.values(column), fmt, max if worst else median)
        rows.append(row)
    return pd.DataFrame(rows)
