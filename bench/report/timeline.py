"""Figures over time: one trial's step times with its fault and phases, and loss curves.

The timeline shows what a number in the table hides: when the fault hit, how long the
world sat in each phase, and what step times looked like before and after (a smaller
world, a straggler). Its top panel is the whole trial; the bottom one zooms in on the
fault, because a 20 ms reconfiguration is invisible next to 200 steps.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from bench.report.plots import log_seconds, save
from bench.report.series import Series, TrialMarks, phase_colour, representative_trial, trial_marks
from bench.scenario.figures import phase_name

RANK_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#F0E442", "#000000", "#999999")


def _steps(series: Series, trial: int, reference: bool = False) -> pd.DataFrame:
    steps = series.run.point_steps(series.point_hash)
    if steps.empty:
        return steps
    sel = steps[steps["reference"] == reference]
    return sel if reference else sel[sel["trial"] == trial]


def _shade(ax: Axes, marks: TrialMarks) -> None:
    for span in marks.spans:
        ax.axvspan(span.start, span.end, color=phase_colour(span.column), alpha=0.35, lw=0)
    for t, _ in marks.injections:
        ax.axvline(t, color="#B00020", lw=1.6, ls="--")


def timeline(series: Series, path: Path) -> tuple[Path | None, str]:
    """Step time of every rank over one representative trial; returns the file and a
    caption (or None and why not)."""
    trial, why = representative_trial(series)
    if trial is None:
        return None, f"{series.name}: no trial to show"
    steps = _steps(series, trial)
    marks = trial_marks(series, trial)
    if steps.empty or marks is None:
        return None, f"{series.name}: no steps.csv or event log for trial {trial} (a baseline copy keeps neither)"
    order = series.run.phase_columns()
    fig = Figure(figsize=(12, 7.2), layout="constrained")
    ax_full, ax_zoom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [1, 1.2]})
    ranks = sorted(steps["rank"].unique())
    for ax in (ax_full, ax_zoom):
        _shade(ax, marks)
        for i, rank in enumerate(ranks):
            r = steps[steps["rank"] == rank].sort_values("t_s")
            colour = RANK_COLOURS[i % len(RANK_COLOURS)]
            # each step a segment over the time it took, at the height of its duration:
            # a stalled step is a long bar, not a line drawn across the gap
            ax.hlines(r["step_s"], r["t_s"] - r["step_s"], r["t_s"], color=colour, lw=1.3, alpha=0.8)
            ax.plot(r["t_s"], r["step_s"], ".", ms=3.5, color=colour, label=f"rank {rank}")
        positive = steps["step_s"][steps["step_s"] > 0]
        if not positive.empty:
            log_seconds(ax.yaxis, float(positive.min()), float(positive.max()))
        ax.set_ylabel("step time (log scale)")
        ax.grid(True, which="both", alpha=0.25)
    lo, hi = _zoom_window(steps, marks)
    ax_zoom.set_xlim(lo, hi)
    ax_full.set_title(f"{series.name}: step time of every rank, {why}", fontsize=10)
    ax_zoom.set_title("around the fault", fontsize=9)
    ax_zoom.set_xlabel("seconds since trial start (each step: a bar over the time it took, a dot at its end)")
    for t, text in marks.injections:
        ax_zoom.annotate(
            text,
            (t, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12),
            textcoords="offset points",
            color="#B00020",
            fontsize=8,
            va="top",
        )
    handles, _ = ax_full.get_legend_handles_labels()
    handles += [
        Patch(color=phase_colour(c), alpha=0.45, label=phase_name(c))
        for c in order
        if any(s.column == c for s in marks.spans)
    ]
    handles.append(ax_full.axvline(math.nan, color="#B00020", ls="--", label="injection"))
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    return save(fig, path), why


def _zoom_window(steps: pd.DataFrame, marks: TrialMarks) -> tuple[float, float]:
    """From a few steps before the first injection to a few steps after the last phase."""
    t0 = min(t for t, _ in marks.injections) if marks.injections else float(steps["t_s"].min())
    t1 = max([s.end for s in marks.spans] + [t0])
    after = steps[steps["t_s"] > t0]
    if not after.empty:  # the first step every rank finished after the fault (a stalled one)
        t1 = max(t1, float(after.groupby("rank")["t_s"].min().max()))
    typical = float(np.nanmedian(steps["step_s"])) if steps["step_s"].notna().any() else 0.01
    pad = max(8 * typical, 0.15 * (t1 - t0), 0.05)
    return t0 - pad, t1 + pad


def loss_curves(series: list[Series], path: Path) -> tuple[Path | None, str]:
    """Loss per step of every trial against the point's fault-free reference, one panel
    per series with the injection step marked; below it, when a reference exists, each
    trial's loss minus the reference's (curves on top of each other hide differences)."""
    panels = []
    for s in series:
        steps = s.run.point_steps(s.point_hash)
        if steps.empty or "loss" not in steps:
            continue
        sel = steps[steps["loss"].notna()]
        if not sel.empty:
            panels.append((s, sel))
    if not panels:
        return None, "no loss values in steps.csv (the workload reports none)"
    cols = 2 if len(panels) > 1 else 1
    nrows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(6.5 * cols, 5.2 * nrows), layout="constrained")
    grid = fig.add_gridspec(2 * nrows, cols, height_ratios=[2.2, 1] * nrows)
    missing = []
    for i, (s, sel) in enumerate(panels):
        row, col = divmod(i, cols)
        ax = fig.add_subplot(grid[2 * row, col])
        if not _loss_panel(ax, fig.add_subplot(grid[2 * row + 1, col], sharex=ax), s, sel):
            missing.append(s.name)
    caption = (
        "loss per step of every fault trial against the fault-free reference run of the same point and "
        "seed (top), and the difference (bottom)"
    )
    if missing:
        caption += f"; no reference was run for {', '.join(missing)} (measure.reference = false)"
    return save(fig, path), caption


def _loss_panel(ax: Axes, ax_d: Axes, s: Series, sel: pd.DataFrame) -> bool:
    """One series: its trials' loss curves (top) and their difference from the
    reference (bottom); False if the run has no reference to compare with."""
    ref = _curve(sel[sel["reference"]]) if sel["reference"].any() else None
    trials = sel[~sel["reference"]]
    if ref is not None:
        ax.plot(ref["step"], ref["loss"], color="#888888", lw=3.0, alpha=0.6, label="fault-free reference")
    curves = _curves(trials)
    diffs = curves.merge(ref, on="step", suffixes=("", "_ref")) if ref is not None else None
    ids = np.sort(trials["trial"].unique())
    for j, (steps, loss) in enumerate(_per_trial(curves, curves["loss"], ids)):
        ax.plot(steps, loss, color=s.colour, lw=1.0, alpha=0.8, label="fault trials" if j == 0 else None)
    if diffs is not None:
        for steps, delta in _per_trial(diffs, diffs["loss"] - diffs["loss_ref"], ids):
            ax_d.plot(steps, delta, color=s.colour, lw=1.0, alpha=0.8)
    if ref is None:
        ax_d.text(
            0.5,
            0.5,
            "no fault-free reference in this run\n(set measure.reference = true)",
            transform=ax_d.transAxes,
            ha="center",
            va="center",
            fontsize=8,
            color="#444444",
        )
    marks = trial_marks(s, int(trials["trial"].min())) if not trials.empty else None
    for k, step in enumerate(marks.inject_steps if marks else []):
        for a in (ax, ax_d):
            a.axvline(step, color="#B00020", ls="--", lw=1.2, label="injection" if a is ax and k == 0 else None)
    if bool((sel["loss"] > 0).all()):
        ax.set_yscale("log")
    ax.set_title(f"{s.name} ({trials['trial'].nunique()} trials)", fontsize=9)
    ax.set_ylabel("training loss")
    ax_d.axhline(0, color="#888888", lw=1)
    ax_d.set_ylabel("minus reference")
    ax_d.set_xlabel("step")
    for a in (ax, ax_d):
        a.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="upper right")
    return ref is not None


def _curves(rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`_curve` of every trial at once (``trial, step, loss``, by trial then step):
    one sort and two group-bys over all of a point's rows instead of three per trial,
    which for a thousand trials was seconds per point. Each trial's curve is the one
    :func:`_curve` makes of its rows alone (the sort is stable, so ties keep their order)."""
    g = rows.sort_values(["trial", "step", "gen", "t_s"])
    size = g.groupby(["trial", "gen", "step"])["rank"].transform("nunique")
    whole = g[size >= g["world_size"].fillna(0)]
    return whole.groupby(["trial", "step"], as_index=False).last()[["trial", "step", "loss"]]


def _per_trial(curves: pd.DataFrame, y: pd.Series, trials: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(steps, y) of each of ``trials`` (sorted) from ``curves`` (sorted by trial); empty
    for a trial with no whole-world step, which is still drawn (as nothing), as before."""
    at = curves["trial"].to_numpy()
    lo, hi = np.searchsorted(at, trials, "left"), np.searchsorted(at, trials, "right")
    step, values = curves["step"].to_numpy(), y.to_numpy()
    return [(step[a:b], values[a:b]) for a, b in zip(lo, hi, strict=True)]


def _curve(group: pd.DataFrame) -> pd.DataFrame:
    """One loss per step of a trial: the loss of the latest world that finished it (a
    replayed step is plotted at its final value). A step that not every rank of its
    world finished (the one a rank died in) has no whole-world loss and is left out."""
    g = group.sort_values(["step", "gen", "t_s"])
    size = g.groupby(["gen", "step"])["rank"].transform("nunique")
    whole = g[size >= g["world_size"].fillna(0)]
    return whole.groupby("step", as_index=False).last()[["step", "loss"]]
