"""Assembling a report: figures and tables into ``report.md`` and ``report.html``.

The content is built once as a list of blocks and rendered twice: Markdown with the
PNGs beside it (for a repository or a CI artefact browser) and one self-contained HTML
page with the same PNGs embedded as base64 (to attach to an issue or mail around).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.report import checkpoints, datapos, diagnosis, mix, output, plots, statesize, tables, tax, timeline
from bench.report.blocks import Report
from bench.report.drawing import Drawing, Pending
from bench.report.series import Series, build_series, representative_trial, run_tags
from bench.results.reader import Run

CSS = """body{font-family:system-ui,sans-serif;max-width:1300px;margin:2em auto;padding:0 1em;color:#222}
table.tbl{border-collapse:collapse;font-size:13px;margin:0.5em 0 1.5em}
table.tbl th,table.tbl td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
table.tbl th{background:#f3f3f3} img{max-width:100%;border:1px solid #eee} figcaption{color:#555;font-size:13px}
code{background:#f5f5f5;padding:0 3px}"""


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    html: Path
    images: list[Path]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:80] or "point"


def build(runs: list[Run], out: Path, workers: int | None = None) -> ReportFiles:
    """Write ``report.md``, ``report.html`` and ``plots/*.png`` into ``out``; the figures
    are drawn by ``workers`` processes (default: one per CPU, :mod:`bench.report.drawing`)
    while the tables are built."""
    series = build_series(runs)
    plot_dir = out / "plots"
    for run in runs:  # read steps.csv once, here, so that every worker inherits it
        run.steps_by_point()
    with Drawing(workers) as draw:
        figures = _submit(draw, series, plot_dir)
        draw.start()
        return _build(runs, series, out, figures)


@dataclass(frozen=True)
class _Figures:
    """The figures the workers draw (the biggest first: they start first)."""

    loss: Pending[tuple[Path | None, str]]
    timelines: list[Pending[tuple[Path | None, str]]]
    ecdf: Pending[Path | None]
    box: Pending[Path | None]
    phases: Pending[Path | None]


def _submit(draw: Drawing, series: list[Series], plot_dir: Path) -> _Figures:
    return _Figures(
        loss=draw.submit(timeline.loss_curves, series, plot_dir / "loss.png"),
        timelines=[
            draw.submit(timeline.timeline, s, plot_dir / f"timeline_{i:02d}_{_slug(s.name)}.png")
            for i, s in enumerate(series)
        ],
        ecdf=draw.submit(plots.ecdf, series, ("ttd_s", "ttr_s"), plot_dir / "ecdf.png"),
        box=draw.submit(plots.boxes, series, ("ttd_s", "ttr_s", "downtime_s"), plot_dir / "box.png"),
        phases=draw.submit(plots.phase_bars, series, plot_dir / "phases.png"),
    )


def _build(runs: list[Run], series: list[Series], out: Path, figures: _Figures) -> ReportFiles:
    plot_dir = out / "plots"
    rep = Report()
    names = ", ".join(sorted({r.name for r in runs}))
    rep.add("h1", f"ftbench report: {names}")
    tags = run_tags(runs) if len(runs) > 1 else [""]
    rep.add(
        "p",
        "Runs: "
        + "; ".join(
            f"{f'**{tag}**: ' if tag else ''}`{r.path}` ({r.info.get('status', '?')}, {r.info.get('created', '?')})"
            for r, tag in zip(runs, tags, strict=True)
        ),
    )
    rep.add(
        "p",
        "Cells read `median [95 % CI of the median] (n)`; the interval needs n >= 6 and is left out "
        "below that. `-` means no trial has the figure (e.g. `ttr_s` of a job that stopped). "
        "Times are differences of CLOCK_MONOTONIC; fault-free reference trials are excluded.",
    )
    rep.add("h2", "Summary")
    rep.add("table", table=tables.summary(series))
    clocks = tables.host_clocks(runs)
    if clocks is not None:
        rep.add("h2", "Clocks across hosts")
        rep.add(
            "p",
            "Each host's CLOCK_MONOTONIC mapped onto the harness's (offset and its uncertainty, from "
            "min-RTT round trips at the start and end of each trial). A figure that subtracts stamps "
            "of two hosts is uncertain by up to the sum of their uncertainties (`ttd_err_s`, "
            "`clock_err_s` in trials.csv); one host's differences keep nanoseconds.",
        )
        rep.add("table", table=clocks)
    _calibration(rep, runs)
    _projection(rep, runs)
    mix.section(rep, runs)
    tax.section(rep, runs, plot_dir)
    checkpoints.section(rep, series)
    datapos.section(rep, series)
    statesize.section(rep, runs, plot_dir)
    _distributions(rep, figures)
    _phases(rep, series, figures.phases)
    diagnosis.timeouts(rep, runs, plot_dir)
    diagnosis.stack_dumps(rep, runs, out)
    _timelines(rep, series, figures.timelines)
    path, caption = figures.loss.result()
    if path is not None:
        rep.add("h2", "Loss against the fault-free reference")
        rep.figure(path, caption, "loss curves")
    else:
        rep.omit("Loss against the fault-free reference", caption)
    _blind_spots(rep, series)
    rep.add("h2", "Points")
    rep.add("table", table=tables.scenario_points(runs))
    rep.add("h2", "Environment")
    rep.add("table", table=tables.environment(runs, tags))
    if rep.left_out:
        rep.add("h2", "Left out")
        for section, why in rep.left_out:
            rep.add("p", f"**{section}**: {why}")
    out.mkdir(parents=True, exist_ok=True)
    md = out / "report.md"
    md.write_text(render_markdown(rep, out))
    page = out / "report.html"
    page.write_text(render_html(rep, f"ftbench report: {names}"))
    return ReportFiles(markdown=md, html=page, images=rep.images)


def _calibration(rep: Report, runs: list[Run]) -> None:
    """A calibration run's verdict: ftbench against the bare torch.distributed loop."""
    for run in runs:
        cal = run.info.get("calibration")
        if not cal:
            continue
        tol = cal.get("tolerance", {})
        rep.add("h2", "Calibration against bare torch.distributed")
        rep.add(
            "p",
            "The same fault and configuration through ftbench (`path=ftbench`, a stock strategy) and "
            "through a reference, interleaved: a bare torch.distributed loop with no ftbench code in its "
            "ranks (`path=bare`), a plain DDP script written as users write one (`path=user`), or that "
            "script run as a command job watched from outside (`path=blackbox`). `diff` is the "
            "difference of the medians (ftbench - reference) with a bootstrap 95 % interval; the "
            f"tolerance is max({tol.get('abs_s', 0) * 1e3:g} ms, {tol.get('rel', 0):.0%} of the "
            "reference median) (half a step for steps_lost). A figure agrees when the whole interval "
            "lies within the tolerance, disagrees when it lies wholly beyond it, and cannot tell "
            "otherwise (or with too few trials); the run exits 0, 1 or 2 on them, as `ftbench gate` "
            f"does{_calibration_outcome(cal)}.",
        )
        rep.add("table", table=tables.calibration(cal))


def _calibration_outcome(cal: dict[str, Any]) -> str:
    """The run's own verdict, where it recorded one (runs before verdicts did not)."""
    if "verdict" not in cal:
        return ""
    return f": this one **{cal['verdict']}** (exit {cal.get('exit_status', '?')})"


def _projection(rep: Report, runs: list[Run]) -> None:
    """What ``ftbench project`` last wrote into a run directory (its default ``--out``)."""
    for run in runs:
        png = run.path / "project" / "project.png"
        if png.exists():
            rep.add("h2", "Projection to cluster scale")
            rep.add(
                "p",
                f"`ftbench project` on `{run.tag}`: effective training time against cluster size, with the "
                f"assumptions and tables in `{png.parent / 'project.md'}` (method: docs/project.md).",
            )
            rep.figure(png, "Share of wall time spent training per strategy (band: 5-95 % bootstrap).", "projection")


def _distributions(rep: Report, figures: _Figures) -> None:
    ecdf, box = figures.ecdf.result(), figures.box.result()
    if ecdf is None and box is None:
        rep.omit("Distributions", "no trial of any point has a latency figure (nothing was detected)")
        return
    rep.add("h2", "Distributions")
    rep.figure(
        ecdf,
        "Empirical CDF of time to detect and time to recover per point (log x): the further "
        "left and the steeper, the faster and the more predictable."
        if ecdf
        else "No trial of any point has ttd_s or ttr_s: nothing was detected, so there is no ECDF.",
        "ECDF",
    )
    rep.figure(box, "Box (median, quartiles, whiskers at 1.5 IQR) per point with every trial as a dot.", "box plots")


def _phases(rep: Report, series: list[Series], bars: Pending[Path | None]) -> None:
    path = bars.result()
    if path is None:
        rep.omit("Phases of recovery", "no trial of any point recovered or was detected, so none has phases")
        return
    rep.add("h2", "Phases of recovery")
    rep.figure(
        path,
        "Median of each phase, stacked in the order they happen (detect, then the strategy's "
        "phases, then catch-up). Medians of the parts need not add up to the median downtime (◆).",
        "phase bars",
    )
    rep.add("table", table=tables.phases(series))


def _blind_spots(rep: Report, series: list[Series]) -> None:
    """What a job watched from outside could not show, per point (trials.csv ``blind``)."""
    rows = []
    for s in series:
        df = s.rows()
        if "blind" not in df:
            continue
        for text in sorted({str(v) for v in df["blind"].dropna() if str(v)}):
            rows.append({"point": s.name, "what could not be known, and why (those figures are empty)": text})
    if rows:
        import pandas as pd

        rep.add("h2", "What the job did not show")
        rep.add(
            "p",
            "A job run as its own command is watched from outside: a figure its output and the probe "
            "cannot tell is left empty, never guessed.",
        )
        rep.add("table", table=pd.DataFrame(rows))


def _timelines(rep: Report, series: list[Series], drawn: list[Pending[tuple[Path | None, str]]]) -> None:
    rep.add("h2", "Step-time timelines")
    rep.add(
        "p",
        "One typical trial per point: every rank's step time (log scale) against time since the trial "
        "started, the injection as a dashed red line and the phases shaded. The lower panel zooms in "
        "on the fault.",
    )
    for s, pending in zip(series, drawn, strict=True):
        rep.add("h3", s.name)
        path, why = pending.result()
        rep.figure(path, why, f"step-time timeline of {s.name}")
        trial, _ = representative_trial(s)
        if trial is None:
            continue
        rows = s.rows()
        downtime = rows[rows["trial"] == trial]["downtime_s"].max() if "downtime_s" in rows else float("nan")
        lines, more = output.around_fault(s.run.events_dir(s.point_hash, trial), float(downtime))
        if lines:
            rep.add("p", "What the job printed around the fault in that trial (seconds from the injection):")
            rep.add("pre", "\n".join(lines + ([f"... {more} more lines in the trial's *.lines files"] if more else [])))


def render_markdown(rep: Report, out: Path) -> str:
    parts = []
    for b in rep.blocks:
        if b.kind in ("h1", "h2", "h3"):
            parts.append("#" * int(b.kind[1]) + " " + b.text + "\n")
        elif b.kind == "p":
            parts.append(b.text + "\n")
        elif b.kind == "note":
            parts.append(f"*{b.text}*\n")
        elif b.kind == "pre":
            parts.append(f"```text\n{b.text}\n```\n")
        elif b.kind == "table" and b.table is not None:
            parts.append(tables.markdown(b.table))
        elif b.kind == "img" and b.image is not None:
            rel = b.image.relative_to(out) if b.image.is_relative_to(out) else b.image
            parts.append(f"![{b.alt}]({rel.as_posix()})\n\n_{b.text}_\n")
    return "\n".join(parts)


def render_html(rep: Report, title: str) -> str:
    body = []
    for b in rep.blocks:
        if b.kind in ("h1", "h2", "h3"):
            body.append(f"<{b.kind}>{tables.escape(b.text)}</{b.kind}>")
        elif b.kind == "p":
            body.append(f"<p>{_inline(b.text)}</p>")
        elif b.kind == "note":
            body.append(f"<p><em>{tables.escape(b.text)}</em></p>")
        elif b.kind == "pre":
            body.append(f"<pre>{tables.escape(b.text)}</pre>")
        elif b.kind == "table" and b.table is not None:
            body.append(tables.html_table(b.table))
        elif b.kind == "img" and b.image is not None:
            data = base64.b64encode(b.image.read_bytes()).decode()
            body.append(
                f'<figure><img alt="{tables.escape(b.alt)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{tables.escape(b.text)}</figcaption></figure>"
            )
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{tables.escape(title)}</title>"
        f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _inline(text: str) -> str:
    """Markdown's `code` and _emphasis_ for the few paragraphs the report writes."""
    out = tables.escape(text)
    out = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', out)  # links (relative paths)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"(?<!\w)_([^_]+)_(?!\w)", r"<em>\1</em>", out)
