"""``ftbench report``: Markdown and self-contained HTML with tables and figures.

Layer: above :mod:`bench.results`, whose run directories it reads; below
:mod:`bench.project` and the commands.

Matplotlib is forced onto its Agg backend before anything draws: reports are made on CI
machines and servers without a display.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from bench.report.document import ReportFiles
from bench.results.reader import load


def make_report(run_dirs: list[str | Path], out: str | Path | None = None, workers: int | None = None) -> ReportFiles:
    """Report on one or several runs. Without ``out`` a single run's report goes into
    its own directory (``report.md``, ``report.html``, ``plots/``); several runs need
    ``out``. ``workers``: processes that draw the figures (default one per CPU; 1 draws
    them in this process, with the same bytes)."""
    from bench.report.document import build
    from bench.scenario.config import ConfigError

    runs = [load(p) for p in run_dirs]
    if out is None:
        if len(runs) > 1:
            raise ConfigError("--out", "", "an output directory when reporting on several runs")
        out = runs[0].path
    return build(runs, Path(out), workers)


__all__ = ["ReportFiles", "make_report"]
