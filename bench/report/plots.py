"""Distribution figures: ECDFs, boxes with every trial, stacked phase bars.

Figures are built on :class:`matplotlib.figure.Figure` directly (no pyplot, so no
global state and nothing to close) and rendered by the Agg canvas. Latencies span
milliseconds (a SIGKILL seen through a reset socket) to seconds (a process-group
timeout), so distributions use logarithmic axes; every series shows ``n`` in its
legend or tick label, and a series without the figure says so instead of vanishing.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from bench.report.series import Series, phase_colour
from bench.results.stats import median
from bench.scenario.figures import phase_name

TITLES = {
    "ttd_s": "time to detect (ttd_s)",
    "ttd_all_s": "time until every survivor detected (ttd_all_s)",
    "ttr_s": "time to recover (ttr_s)",
    "downtime_s": "downtime (ttd_s + ttr_s)",
}
DPI = 110


def save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", facecolor="white")
    return path


def _fmt_s(v: float) -> str:
    if math.isnan(v):
        return "-"
    return f"{v * 1e3:.3g} ms" if v < 1 else f"{v:.3g} s"


def log_seconds(axis: Axis, lo: float, hi: float) -> None:
    """A logarithmic axis in seconds with readable labels ("15 ms", "5 s"): decades get
    labels, and when the data span less than two decades so do 2x and 5x, with a
    margin so that a narrow distribution is not squeezed against the frame."""
    is_x = axis is axis.axes.xaxis
    (axis.axes.set_xscale if is_x else axis.axes.set_yscale)("log")
    fmt = FuncFormatter(lambda v, _pos: _fmt_s(v))
    axis.set_major_locator(LogLocator(base=10))
    axis.set_major_formatter(fmt)
    span = max(hi / lo, 1.0)
    if span < 3:
        subs: tuple[float, ...] = (1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)
    elif span < 100:
        subs = (2.0, 3.0, 5.0)
    else:
        subs = (2.0, 5.0)
    axis.set_minor_locator(LogLocator(base=10, subs=subs))
    axis.set_minor_formatter(fmt if span < 10_000 else NullFormatter())
    margin = 1.6 if span < 3 else 1.25
    (axis.axes.set_xlim if is_x else axis.axes.set_ylim)(lo / margin, hi * margin)


def _missing_entries(series: list[Series], metric: str) -> list[Line2D]:
    """Legend entries (a cross, no line) for series that have no value of the figure."""
    return [
        Line2D([], [], color=s.colour, marker="x", ls="none", label=f"{s.name}: no {metric} ({s.outcomes_text()})")
        for s in series
        if not s.values(metric)
    ]


def ecdf(series: list[Series], metrics: tuple[str, ...], path: Path) -> Path | None:
    """Empirical CDF of each figure, one line per series, log x-axis."""
    metrics = tuple(m for m in metrics if any(s.values(m) for s in series))
    if not metrics:
        return None
    fig = Figure(figsize=(6.2 * len(metrics), 4.6), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        for s in series:
            xs = sorted(v for v in s.values(metric) if v > 0)
            if not xs:
                continue
            ys = np.arange(1, len(xs) + 1) / len(xs)
            ax.step(
                [xs[0], *xs],
                [0.0, *ys],
                where="post",
                color=s.colour,
                lw=2,
                ls=s.linestyle,
                marker=s.marker,
                ms=4,
                markevery=list(range(1, len(xs) + 1)),
                label=f"{s.name} (n={len(xs)}, median {_fmt_s(median(xs))})",
            )
        values = [v for s in series for v in s.values(metric) if v > 0]
        log_seconds(ax.xaxis, min(values), max(values))
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("seconds (log scale)")
        ax.set_ylabel("fraction of trials ≤ x")
        ax.set_title(TITLES.get(metric, metric))
        ax.grid(True, which="both", alpha=0.3)
        handles, _ = ax.get_legend_handles_labels()
        ax.legend(
            handles=handles + _missing_entries(series, metric),
            fontsize=8,
            loc="upper left",
            bbox_to_anchor=(0.0, -0.14),
            frameon=False,
        )
    return save(fig, path)


def boxes(series: list[Series], metrics: tuple[str, ...], path: Path) -> Path | None:
    """A box (median, quartiles, 1.5 IQR whiskers) per series with every trial on top."""
    metrics = tuple(m for m in metrics if any(s.values(m) for s in series))
    if not metrics:
        return None
    rng = np.random.default_rng(0)  # fixed jitter: the same data draws the same picture
    width = min(18.0, max(4.5, 1.35 * len(series) + 2))
    if len(series) > 4:  # many points: one row per figure, so the labels have room
        fig = Figure(figsize=(width, 4.6 * len(metrics)), layout="constrained")
        axes = fig.subplots(len(metrics), 1, squeeze=False)[:, 0]
    else:
        fig = Figure(figsize=(width * len(metrics), 5.0), layout="constrained")
        axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        _box_panel(ax, series, metric, rng)
    return save(fig, path)


def _box_panel(ax: Axes, series: list[Series], metric: str, rng: np.random.Generator) -> None:
    """One figure's boxes; every series keeps its x position in every panel, and one
    without the figure says so there."""
    present = [(i, s) for i, s in enumerate(series) if s.values(metric)]
    data = [s.values(metric) for _, s in present]
    bp = ax.boxplot(
        data,
        positions=[i for i, _ in present],
        widths=0.5,
        showfliers=False,
        patch_artist=True,
        medianprops={"color": "black", "lw": 2},
    )
    for patch, (_, s) in zip(bp["boxes"], present, strict=True):
        patch.set_facecolor(s.colour)
        patch.set_alpha(0.25)
    for (i, s), vals in zip(present, data, strict=True):
        ax.plot(
            i + rng.uniform(-0.12, 0.12, len(vals)),
            vals,
            s.marker,
            color=s.colour,
            ms=5,
            alpha=0.85,
            markeredgecolor="black",
            markeredgewidth=0.4,
        )
    for i, s in enumerate(series):
        if not s.values(metric):
            ax.text(
                i,
                0.5,
                f"no {metric}\n({s.outcomes_text()})",
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="center",
                fontsize=8,
                color="#666666",
            )
    ax.set_xticks(range(len(series)), [f"{_wrap(s.name)}\nn={len(s.values(metric))}" for s in series], fontsize=8)
    ax.set_xlim(-0.6, len(series) - 0.4)
    values = [v for vals in data for v in vals]
    if min(values) > 0:
        log_seconds(ax.yaxis, min(values), max(values))
        ax.set_ylabel("seconds (log scale)")
    else:
        ax.set_ylabel("seconds")
    ax.set_title(TITLES.get(metric, metric))
    ax.grid(True, axis="y", which="both", alpha=0.3)


def _ink(background: str) -> str:
    """Black or white, whichever reads on ``background`` (relative luminance)."""
    r, g, b = (int(background[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return "white" if 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.45 else "black"


def _wrap(name: str) -> str:
    """A point label on several short lines (one per swept value) for a tick."""
    lines = []
    for part in name.replace(": ", ":\n").replace(" ", "\n").split("\n"):
        lines += part.replace("(", "\n(").split("\n") if len(part) > 16 else [part]
    return "\n".join(lines)


def phase_bars(series: list[Series], path: Path) -> Path | None:
    """Median of every phase per series, stacked: absolute seconds on the left, shares
    of the total on the right (so a 5 ms phase beside a 5 s timeout stays visible).
    Medians of parts need not add up to the median of the whole: the median downtime
    is marked separately."""
    order: list[str] = []
    for s in series:
        order += [c for c in s.run.phase_columns() if c not in order]
    if not order:
        return None
    rows = _phase_rows(series, order)
    if not rows:
        return None
    height = 1.2 + 0.65 * len(rows)
    fig = Figure(figsize=(13, max(3.0, height)), layout="constrained")
    ax_abs, ax_rel = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    ys = np.arange(len(rows))[::-1]
    for y, row in zip(ys, rows, strict=True):
        _phase_bar(ax_abs, ax_rel, y, row)
    labels = [s.name for s, *_ in rows]
    ax_abs.set_yticks(ys, labels, fontsize=8)
    ax_rel.set_yticks(ys, [""] * len(rows))
    ax_abs.set_xlabel("seconds since the injection (medians of each phase)")
    ax_abs.set_title(
        "phases of recovery, median seconds  (◆ median downtime, or ttd where nothing recovered)", fontsize=9
    )
    ax_rel.set_xlim(0, 1)
    ax_rel.set_xlabel("share of the summed medians")
    ax_rel.set_title("phases as shares", fontsize=9)
    handles = [Patch(color=phase_colour(c), label=phase_name(c)) for c in order]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(order), fontsize=8)
    for ax in (ax_abs, ax_rel):
        ax.grid(True, axis="x", alpha=0.3)
    xmax = max(max(sum(v for v in m.values() if not math.isnan(v)), 0 if math.isnan(t) else t) for _, m, _, t in rows)
    ax_abs.set_xlim(0, xmax * 1.4 if xmax > 0 else 1)
    return save(fig, path)


PhaseRow = tuple[Series, dict[str, float], int, float]
"""A series, the median of each phase, the trials behind them, the median downtime."""


def _phase_rows(series: list[Series], order: list[str]) -> list[PhaseRow]:
    rows = []
    for s in series:
        meds = {c: (median(s.values(c)) if s.values(c) else math.nan) for c in order}
        if all(math.isnan(v) for v in meds.values()):
            continue
        n = max(len(s.values(c)) for c in order)
        whole_values = s.values("downtime_s") or s.values("ttd_s")
        rows.append((s, meds, n, median(whole_values) if whole_values else math.nan))
    return rows


def _phase_bar(ax_abs: Axes, ax_rel: Axes, y: float, row: PhaseRow) -> None:
    """One series' stacked phases, in seconds (left) and as shares (right)."""
    s, meds, n, total = row
    left = 0.0
    whole = sum(v for v in meds.values() if not math.isnan(v))
    for c in s.run.phase_columns(s.point_hash):  # this strategy's phases, in its own order
        v = meds[c]
        if math.isnan(v):
            continue
        colour = phase_colour(c)
        ax_abs.barh(y, v, left=left, color=colour, edgecolor="white", height=0.6)
        share = v / whole if whole > 0 else 0.0
        rel_left = left / whole if whole > 0 else 0.0
        ax_rel.barh(y, share, left=rel_left, color=colour, edgecolor="white", height=0.6)
        if share >= 0.12:
            ax_rel.text(rel_left + share / 2, y, _fmt_s(v), ha="center", va="center", fontsize=7, color=_ink(colour))
        left += v
    if not math.isnan(total):
        ax_abs.plot([total], [y], marker="D", color="black", ms=6, zorder=5)
    end = left if math.isnan(total) else max(left, total)
    ax_abs.annotate(
        f"sum {_fmt_s(left)}, n={n}", (end, y), xytext=(8, 0), textcoords="offset points", va="center", fontsize=8
    )
