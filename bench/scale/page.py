"""Showing a scale run: the per-point table, the fits and crossings, the anchors, the
limits that stopped each coordinator, and log-log plots with the fitted curves; as
terminal text and as ``scale.md`` beside ``scale.png``.

Plots are drawn on a :class:`matplotlib.figure.Figure` (no pyplot state, no backend
warnings): one panel per coordinator, each operation's p95 as filled markers and p50 as
hollow ones, its fitted p95 curve solid over the sizes measured and dashed beyond, and
the 1 s, 10 s and 60 s thresholds.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from bench.report.tables import markdown, text_table
from bench.scale import anchors
from bench.scale.coordinators import COORDINATORS
from bench.scale.curves import THRESHOLDS, Curve, all_curves, fits_table, points_table
from bench.scale.model import report
from bench.scale.model.machine import CLUSTER, Machine
from bench.scale.model.predict import Model
from bench.scale.rundir import ScaleRun
from bench.scale.spec import FULL_SIZES, ONCE_ABOVE

DPI = 110


def stops_lines(run: ScaleRun) -> list[str]:
    """Where each coordinator (or operation) stopped, and the limit."""
    out = []
    for s in run.stops:
        what = f"{s.coordinator} / {s.op}" if s.op else s.coordinator
        out.append(f"{what}: stopped at N = {s.n:,} ({s.limit}): {s.reason}")
    measured = {str(c) for c in run.records["coordinator"].unique()} if not run.records.empty else set()
    largest = max(run.spec.sizes)
    for name in run.spec.coordinators:
        if name in run.info.get("skipped", {}):
            out.append(f"{name}: skipped: {run.info['skipped'][name]}")
        elif name in measured and not any(s.coordinator == name for s in run.stops):
            out.append(f"{name}: every operation measured up to N = {largest:,} (the sweep's largest)")
    return out


def context_lines(run: ScaleRun) -> list[str]:
    info = run.info
    spec = run.spec
    m, clock = info.get("machine", {}), info.get("clock", {})
    before, after = info.get("load_before", {}), info.get("load_after", {})
    return [
        f"machine: {m.get('cpus')} CPUs, {m.get('memory_bytes', 0) / 1e9:.1f} GB, {m.get('platform', '')}",
        f"torch {info.get('versions', {}).get('torch')}, torchft {info.get('versions', {}).get('torchft')}, "
        f"NVRx {info.get('versions', {}).get('nvrx')}",
        f"load average (1, 5, 15 min) before {before.get('loadavg')}, after {after.get('loadavg')}",
        f"clock: {clock.get('clock', 'CLOCK_MONOTONIC')} ({clock.get('resolution_s')} s); CPU time: "
        f"{clock.get('cpu_time', '/proc/PID/stat')}, resolution {clock.get('cpu_resolution_s', 0.01):g} s",
        f"resolver: {info.get('resolver', '')}",
        f"network: {info.get('network', 'the host loopback')}; {info.get('limits', {}).get('raised', '')}",
        f"repeats: {spec.repeats} per point up to {ONCE_ABOVE:,} participants, 1 above; time budget of an operation: "
        f"{spec.deadline_s:g} s",
        "settings: " + ", ".join(f"{k} = {v}" for k, v in spec.knobs().items()),
        f"duration: {info.get('duration_s', '?')} s" + (" (interrupted)" if info.get("interrupted") else ""),
    ]


def plot(run: ScaleRun, path: Path) -> Path:
    """Log-log latency against participants, a panel per coordinator."""
    curves = {(c.coordinator, c.op, c.stat): c for c in all_curves(run)}
    names = [n for n in run.spec.coordinators if any(k[0] == n for k in curves)]
    cols = 3
    rows = max(1, math.ceil(len(names) / cols))
    fig = Figure(figsize=(5.2 * cols, 4.2 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    top = max(FULL_SIZES[-1], max(run.spec.sizes))
    for ax, name in zip(axes.flat, names, strict=False):
        ops = [o.name for o in COORDINATORS[name].ops] if name in COORDINATORS else []
        for k, op in enumerate(ops):
            colour = f"C{k}"
            p95, p50 = curves.get((name, op, "p95_s")), curves.get((name, op, "p50_s"))
            if p95 is None:
                continue
            ax.plot(p95.n, np.maximum(p95.y, 1e-6), "o", color=colour, ms=4, label=f"{op} p95")
            if p50 is not None:
                ax.plot(p50.n, np.maximum(p50.y, 1e-6), "o", mfc="none", color=colour, ms=4)
            _fit_line(ax, p95, top, colour)
        for t in THRESHOLDS:
            ax.axhline(t, color="#999", lw=0.6, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{name} (participant: {COORDINATORS[name].unit})" if name in COORDINATORS else name, fontsize=9)
        ax.set_xlabel("participants N")
        ax.set_ylabel("seconds from release")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"{run.tag}: filled p95, hollow p50; lines: fitted p95 (dashed: extrapolated); dotted: 1, 10, 60 s", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, facecolor="white")
    return path


def _fit_line(ax: object, c: Curve, top: int, colour: str) -> None:
    lo = float(c.n.min())
    inside = np.geomspace(lo, c.max_n, 40)
    beyond = np.geomspace(c.max_n, top, 40) if top > c.max_n else np.array([])
    for xs, style in ((inside, "-"), (beyond, "--")):
        if len(xs) == 0:
            continue
        ys = np.maximum([c.at(x) for x in xs], 1e-6)
        ax.plot(xs, ys, style, color=colour, lw=1, alpha=0.8)  # type: ignore[attr-defined]


def _model(run: ScaleRun, machine: Machine | None) -> tuple[Model, Machine] | None:
    """The model of the protocols calibrated by ``run``, where the run has the readings."""
    model = Model.of(run)
    if not model.demand.ops:
        return None
    return model, machine or CLUSTER


def model_text(run: ScaleRun, machine: Machine | None = None) -> str:
    got = _model(run, machine)
    if got is None:
        return "No model: this run lacks the coordinator's service and segment readings (an older ftbench)."
    return report.text(*got)


def text(run: ScaleRun, machine: Machine | None = None) -> str:
    curves = all_curves(run)
    return "\n".join(
        [
            f"Control planes at scale: {run.tag} (seconds from the release of an operation to each participant's "
            "result; medians over repetitions)",
            "",
            text_table(points_table(run)),
            "",
            "Growth models (relative least squares, AICc; every repetition a point) and where they cross 1, 10, 60 s:",
            "",
            text_table(fits_table(curves)),
            "",
            "Where each coordinator stopped:",
            *(f"  {line}" for line in stops_lines(run)),
            "",
            "Published figures beside this run's (time until every participant had its result):",
            "",
            text_table(anchors.table(run).drop(columns=["why they differ", "source"])),
            "",
            model_text(run, machine),
            "",
            "Context:",
            *(f"  {line}" for line in context_lines(run)),
        ]
    )


def write(run: ScaleRun, machine: Machine | None = None) -> tuple[Path, Path]:
    png = plot(run, run.path / "scale.png")
    curves = all_curves(run)
    got = _model(run, machine)
    modelled = report.markdown_sections(*got) if got is not None else ["## The model", "", model_text(run), ""]
    doc = [
        f"# Control planes at scale: {run.tag}",
        "",
        "Seconds from the release of an operation to each participant's result: p50 and p95 over the "
        "participants, `all` when the last had it; medians over repetitions. Empty: the figure does not exist "
        "(not every participant finished).",
        "",
        f"![latency against participants]({png.name})",
        "",
        markdown(points_table(run)),
        "## Growth models and crossings",
        "",
        markdown(fits_table(curves)),
        "## Where each coordinator stopped",
        "",
        *(f"- {line}" for line in stops_lines(run)),
        "",
        "## Published figures beside this run's",
        "",
        markdown(anchors.table(run)),
        *modelled,
        "## Context",
        "",
        *(f"- {line}" for line in context_lines(run)),
        "",
        "How this is measured: docs/scale.md.",
    ]
    md = run.path / "scale.md"
    md.write_text("\n".join(doc) + "\n")
    return md, png
