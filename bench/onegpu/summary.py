"""The one-GPU run's summary: the figures its sections were for, in one Markdown page.

Each table is one the report already makes of such a run (the summary and phase tables,
the checkpoint designs, the state-size fits, the fault-free tax), so the summary reads
the run directories as ``ftbench report`` does and says no more than it would. Beside
them: each checkpoint point's own rate in seconds per GB (the time over the bytes it
moved: with two sizes and a trial or two there may be no fit yet), and what each
section finished of what it planned, so a section stopped at its budget says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from bench.onegpu.plan import Section
from bench.report import checkpoints, statesize, tax
from bench.report.series import Series, build_series
from bench.report.tables import markdown, phases, summary
from bench.results import stats
from bench.results.reader import Run, load
from bench.results.statefit import GB, by_design, checkpoint_designs, fit_state_phases
from bench.results.tax import strategy_tax


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a section ended: its run directory (None if it never made one), ``status``
    (``complete``, ``stopped at its budget``, ``failed (exit N)``, ``not started: ...``),
    its wall time."""

    section: Section
    run: Path | None
    status: str
    wall_s: float


def render(outcomes: Sequence[Outcome], header: dict[str, Any]) -> str:
    """The page: what ran where, then each section's tables."""
    lines = [f"# ftbench on one GPU: {header.get('device', 'no GPU')}", ""]
    lines += [f"- {k}: {v}" for k, v in header.items()]
    lines += ["", markdown(_sections(outcomes))]
    for o in outcomes:
        lines += [f"## {o.section.name}: {o.section.what}", ""]
        if o.run is None:
            lines += [f"_{o.status}: no run directory._", ""]
            continue
        run = load(o.run)
        lines += [f"`{o.run.parent.name}/{o.run.name}` ({o.status}).", ""]
        lines += _body(o.section.name, run)
        skipped = run.info.get("skipped") or {}
        lines += [f"- skipped {label}: {why}" for label, why in skipped.items()]
        lines.append("")
    return "\n".join(lines)


def _sections(outcomes: Sequence[Outcome]) -> pd.DataFrame:
    rows = []
    for o in outcomes:
        trials = planned = 0
        if o.run is not None:
            run = load(o.run)
            done = run.measured()
            trials = int(done[["point_hash", "trial"]].drop_duplicates().shape[0]) if not done.empty else 0
            planned = len(run.info.get("points", [])) * int(run.info.get("trials", 0) or 0)
        rows.append(
            {
                "section": o.section.name,
                "scenario": o.section.scenario,
                "status": o.status,
                "trials done": f"{trials} of {planned}" if planned else str(trials),
                "wall": f"{o.wall_s:.0f} s",
                "budget": f"{o.section.budget_s:.0f} s",
            }
        )
    return pd.DataFrame(rows)


def _body(name: str, run: Run) -> list[str]:
    series = build_series([run])
    if not series:
        return ["_No trial finished._", ""]
    if name == "tax":
        return [markdown(tax.table(strategy_tax(run))), ""]
    out = [markdown(_outcomes(series)), "", "Phases (median, s):", "", markdown(phases(series)), ""]
    if name == "checkpoints":
        out += ["Checkpoint designs:", "", markdown(checkpoints.table(series)), ""]
        out += ["Each point's own rate, seconds per GB moved (median over trials):", "", markdown(rates(series)), ""]
        fits = fit_state_phases(by_design(run.measured(), checkpoint_designs(run)))
        if fits:
            out += ["Fitted over the sizes (`ftbench report` draws them):", "", markdown(statesize.table(fits)), ""]
    return out


def _outcomes(series: list[Series]) -> pd.DataFrame:
    """The report's summary table, cut to what a recovery is read by."""
    df = summary(series)
    return df[[c for c in ("point", "outcomes", "ttd_s", "ttr_s", "downtime_s", "steps_lost") if c in df]]


def rates(series: list[Series]) -> pd.DataFrame:
    """Per point: seconds per GB of what each save held the loop for, of what an
    asynchronous save left to the background, and of the restore (median over trials)."""
    rows = []
    for s in series:
        row: dict[str, str] = {"point": s.name}
        trials = s.rows()
        for title, secs, nbytes in (
            ("save blocked s/GB", "checkpoint_blocked_s", "checkpoint_bytes"),
            ("save background s/GB", "checkpoint_background_s", "checkpoint_bytes"),
            ("restore s/GB", "restore_s", "restore_bytes"),
        ):
            row[title] = _rate(trials, secs, nbytes)
        rows.append(row)
    return pd.DataFrame(rows)


def _rate(trials: pd.DataFrame, secs: str, nbytes: str) -> str:
    """``median (n=N)`` of seconds over GB, from the trials that have both, or ``-``."""
    if secs not in trials or nbytes not in trials:
        return "-"
    both = trials[[secs, nbytes]].apply(pd.to_numeric, errors="coerce").dropna()
    both = both[both[nbytes] > 0]
    if both.empty:
        return "-"
    return f"{stats.median(list(both[secs] / both[nbytes] * GB)):.3g} (n={len(both)})"
