"""The report's section for runs whose state size varies (a ``state-scaling`` run, or any
sweep of ``workload.state_mb``): what each stack pays per GB of state and what it pays
whatever the size.

The table holds the fits of :mod:`bench.results.statefit`; the plot shows every trial's
phase time against its bytes per stack (log x, so 0.5 MB and 1 GB share an axis) with
the fitted line, so that a line that misses its points, or an interval from three
noisy rows, is seen as such.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bench.report.blocks import Report
from bench.report.plots import save
from bench.report.tables import seconds, size
from bench.results.reader import Run
from bench.results.statefit import (
    GB,
    PHASES,
    StateFit,
    by_design,
    checkpoint_designs,
    fit_state_phases,
    points,
    varies,
)

#: What each fitted phase is, for the table and the plot titles.
MEANING = {
    "restore": "restore_s against restore_bytes (checkpoint load, peer broadcast, heal)",
    "checkpoint_blocked": "checkpoint_blocked_s (per save) against checkpoint_bytes",
    "phase_restore": "the stack's restore phase (new group to loaded state) against restore_bytes",
    "phase_build": "the stack's build phase (a new process builds model and optimizer) against restore_bytes",
    "checkpoint_background": "checkpoint_background_s (per asynchronous save: the write left to the background) "
    "against checkpoint_bytes",
    "phase_upload": "the stack's upload phase (a new GPU rank moves model and optimizer to the device) against "
    "restore_bytes",
}


def section(rep: Report, runs: list[Run], plot_dir: Path) -> None:
    """Add the section for every run whose state bytes vary."""
    for run in runs:
        trials = by_design(run.measured(), checkpoint_designs(run))
        if trials.empty or not varies(trials):
            continue
        fits = fit_state_phases(trials)
        rep.add("h2", f"Phase time against state size ({run.tag})")
        rep.add(
            "p",
            "Each stack's phases that move state, fitted as `seconds = intercept + slope x bytes` by least "
            "squares over fault trials; the slope in seconds per GB (10^9 bytes) with a bootstrap 95 % "
            "interval over trials (seeded). A line needs at least 2 sizes and 3 trials; with fewer there "
            "is no row. Bytes are what the phase moved: `restore_bytes` is one transfer (a rank's state), "
            "`checkpoint_bytes` what one save wrote, every rank together. A stack whose points saved with "
            "several checkpoint designs has a line per design (`restart (dcp)`). "
            + "; ".join(f"`{k}`: {v}" for k, v in MEANING.items())
            + ".",
        )
        if fits:
            rep.add("table", table=table(fits))
        else:
            rep.add("p", "_No stack has enough sizes or trials of any phase for a fit._")
        rep.figure(
            plot(trials, fits, plot_dir / f"statesize_{run.path.name}.png"),
            "Phase time against bytes per stack (log x and y): every trial a dot, the fitted line drawn "
            "over the sizes it was fitted on.",
            "phase time against state size",
        )


def table(fits: list[StateFit]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "stack": f.strategy,
                "phase": f.phase,
                "s/GB [95 % CI]": f"{f.s_per_gb:.3g} [{f.low:.3g}, {f.high:.3g}]",
                "intercept": seconds(f.intercept_s),
                "n": f.n,
                "sizes": f"{size(f.min_bytes)} - {size(f.max_bytes)}",
            }
            for f in fits
        ]
    )


def plot(trials: pd.DataFrame, fits: list[StateFit], path: Path) -> Path | None:
    strategies = list(dict.fromkeys(str(s) for s in trials["strategy"]))
    panels = []
    for phase, secs, nbytes in PHASES:
        pts = {s: points(trials, s, secs, nbytes) for s in strategies}
        if any(len(set(xs)) >= 2 for xs, _ in pts.values()):
            panels.append((phase, pts))
    if not panels:
        return None
    colours = {s: f"C{i % 10}" for i, s in enumerate(strategies)}
    by_key = {(f.strategy, f.phase): f for f in fits}
    fig = Figure(figsize=(5.2 * min(2, len(panels)), 4.0 * math.ceil(len(panels) / 2)))
    for k, (phase, pts) in enumerate(panels):
        ax = fig.add_subplot(math.ceil(len(panels) / 2), min(2, len(panels)), k + 1)
        for s, (xs, ys) in pts.items():
            if not xs:
                continue
            f = by_key.get((s, phase))
            label = s if f is None else f"{s}: {f.s_per_gb:.3g} s/GB"
            ax.scatter(xs, [max(y, 1e-6) for y in ys], s=14, color=colours[s], alpha=0.8, label=label)
            if f is not None:
                grid = np.geomspace(f.min_bytes, f.max_bytes, 50)
                line = f.intercept_s + f.s_per_gb * grid / GB
                ok = line > 0
                ax.plot(grid[ok], line[ok], color=colours[s], linewidth=1.2)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(phase, fontsize=10)
        ax.set_xlabel("bytes")
        ax.set_ylabel("seconds")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save(fig, path)
