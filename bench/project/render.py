"""Showing a projection: two tables, the plot, the assumptions, as text and Markdown.

The tables are pandas frames rendered by the report's own Markdown writer (so a
projection pasted into an issue reads like a report) and as aligned text for the
terminal. The plot draws E against cluster size on a log axis, one panel per fault
kind, a line per strategy with its band shaded; sizes between the requested ones are
projected on a log grid so that the curve is a curve.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bench.project import Result, build, gpu
from bench.project.assumptions import lines
from bench.project.model import PARTS, UNMEASURED, Cell, Projection, fmt_pct
from bench.report.tables import markdown, text_table

DPI = 110
GRID = 17


def _cell(p: Projection, i: int) -> str:
    if p.point.reason:
        return "—"
    c = p.cells[i]
    return f"{fmt_pct(c.effective)} [{100 * c.low:.2f}–{100 * c.high:.2f}]"


def effective_table(res: Result) -> pd.DataFrame:
    """One row per point: E with its 90 % band at each cluster size, or why there is none."""
    rows = []
    for p in res.projections:
        row: dict[str, object] = {"fault": p.point.fault, "strategy": p.point.strategy}
        for i, n in enumerate(res.cluster.gpus):
            row[f"{n:,} GPUs"] = _cell(p, i)
        row["note"] = p.point.reason or "; ".join(p.notes)
        rows.append(row)
    return pd.DataFrame(rows)


def _seconds(v: float) -> str:
    if v >= 3600:
        return f"{v / 3600:.2f} h"
    return f"{v / 60:.1f} min" if v >= 120 else f"{v:.3g} s"


def parts_table(res: Result) -> pd.DataFrame:
    """Where the wall time goes: each part's share, with the rate and lost time per failure."""
    rows = []
    for p in res.projections:
        if p.point.reason:
            continue
        for c in p.cells:
            row: dict[str, object] = {
                "fault": p.point.fault,
                "strategy": p.point.strategy,
                "GPUs": f"{c.gpus:,}",
                "failures/day": f"{c.rate_per_day:.3g}",
                "lost/failure": _seconds(c.lost_s),
                "tau": "-" if c.tau_s is None else _seconds(c.tau_s),
            }
            row.update({k: f"{100 * c.shares.get(k, 0.0):.3f} %" for k in PARTS})
            row["training"] = fmt_pct(c.effective)
            rows.append(row)
    return pd.DataFrame(rows)


def models_lines(res: Result) -> list[str]:
    """Each fitted phase's growth model per point; one line for a point the scaling run
    did not measure."""
    out = []
    for p in res.projections:
        if p.point.reason:
            continue
        name = f"{p.point.fault} / {p.point.strategy}"
        fitted = {ph: how for ph, how in p.models.items() if not how.startswith(UNMEASURED)}
        out += [f"{name} / {ph}: {how}" for ph, how in fitted.items()]
        if not fitted:
            out.append(f"{name}: no phase scaled (not in the scaling run, no control-plane curve): all constant")
    return out


def inputs_table(res: Result) -> pd.DataFrame:
    """Per strategy, whether the tax, the checkpoint write and the restore were measured
    (and where) or assumed, at the cluster's largest size."""
    c, inp = res.cluster, res.inputs
    n = max(c.gpus)
    nbytes = c.state_bytes(n)
    rows = []
    for st in dict.fromkeys(p.point.strategy for p in res.projections if not p.point.reason):
        pt = next(p.point for p in res.projections if p.point.strategy == st and not p.point.reason)
        tax = inp.tax.get(st)
        save, restore = inp.save.get(st), inp.restore.get(st)
        if not pt.checkpoints:
            write = "none (writes no checkpoints)"
        elif save is not None and nbytes is not None:
            write = f"measured: {save.describe(nbytes)}"
        else:
            why = "no state size given" if nbytes is None else "no fit for this stack"
            write = f"assumed: {c.checkpoint_write_s:g} s ({why})"
        if "restore" not in pt.phases:
            rest = "none (no restore phase)"
        elif restore is not None and nbytes is not None:
            rest = f"measured: {restore.describe(nbytes)}"
        else:
            rest = "as measured in the run (its own state size)"
        if tax is None:
            taxed = "assumed: 1 (none measured)"
        else:
            taxed = f"measured: {tax.value:.3f} [{tax.low:.3f}–{tax.high:.3f}]"
            taxed += " (used: 1, below 1 is no gain)" if tax.value < 1.0 else ""
        rows.append(
            {
                "strategy": st,
                "fault-free tax (step time / DDP's)": taxed,
                f"checkpoint write at {n:,} GPUs": write,
                "restore": rest,
                f"control plane at {n:,} GPUs": _control(res, st, n),
            }
        )
    return pd.DataFrame(rows)


def _control(res: Result, strategy: str, gpus: int) -> str:
    """Which of a stack's phases came from a scale run's curve, and their value there."""
    used = [u for u in res.control_used if u.strategy == strategy]
    if used:
        point = next(p.point for p in res.projections if p.point.strategy == strategy)
        where = {u.phase: u.phase if u.phase in point.phases else u.fallback for u in used}
        return "; ".join(u.describe(gpus, where[u.phase]) for u in used)
    if res.control is None:
        return "assumed: as the run and --scaling give it (no scale run)"
    return "none measured for this stack (its phases as the run and --scaling give them)"


def inputs_lines(res: Result) -> list[str]:
    """Which runs the measured inputs came from, and the state size they were taken at."""
    inp, c = res.inputs, res.cluster
    out = [
        f"tax: {inp.tax_run}"
        if inp.tax_run
        else "tax: no resilience-tax run (--tax): every stack assumed as fast as DDP on a fault-free step",
        f"state fits: {inp.state_run}"
        if inp.state_run
        else "state fits: no state-scaling run (--state): checkpoint writes take checkpoint_write_s",
        f"control plane: {res.control.path}"
        if res.control is not None
        else "control plane: no scale run (--scale): control-plane phases grow as the run and --scaling give them",
    ]
    sizes = [(n, c.state_bytes(n)) for n in c.gpus]
    if sizes[0][1] is not None:
        out.append("state per GPU: " + ", ".join(f"{b / 1e9:.3g} GB at {n:,} GPUs" for n, b in sizes if b is not None))
    writers = dict.fromkeys(p.point.strategy for p in res.projections if p.point.checkpoints and not p.point.reason)
    assumed = [st for st in writers if st not in inp.save or sizes[0][1] is None]
    if writers:
        out.append(
            f"checkpoint_write_s = {c.checkpoint_write_s:g} s is assumed for: {', '.join(assumed)}"
            if assumed
            else "checkpoint_write_s is not used: every checkpointing stack's write is measured"
        )
    return out + inp.notes


def gpu_table(res: Result) -> pd.DataFrame:
    """The GPU phases each stack pays at each size (:mod:`bench.project.gpu`)."""
    return pd.DataFrame(gpu_rows(res))


def _gpu_text(res: Result) -> list[str]:
    """The GPU phases' section of the terminal output."""
    head = ["", "GPU phases (assumed from published figures; share of wall time as in the table above):", ""]
    table = [text_table(gpu_table(res))] if res.cluster.gpu_phases else []
    return head + table + [f"  {line}" for line in gpu_lines(res)]


def _gpu_markdown(res: Result) -> list[str]:
    """The GPU phases' section of ``project.md``."""
    table = [markdown(gpu_table(res))] if res.cluster.gpu_phases else []
    return ["## GPU phases, assumed from published figures", "", *table, *(f"- {line}" for line in gpu_lines(res)), ""]


def _pct(v: float) -> float:
    return 100.0 * v


def _lost(v: float) -> float:
    """Per cent of wall time lost; NaN where none is (a log axis cannot show 0)."""
    lost = 100.0 * (1.0 - v)
    return lost if lost > 0 else math.nan


def _lost_scale(ax: Axes, cells: list[Cell]) -> None:
    """A log axis for the time lost where some is; a linear one, said so, where a
    projection loses nothing at all (matplotlib cannot log-scale no positive values)."""
    if any(_lost(c.effective) > 0 or _lost(c.low) > 0 for c in cells):
        ax.set_yscale("log", nonpositive="mask")
        ax.set_ylabel("wall time lost (%, log)")
    else:
        ax.set_ylabel("wall time lost (%): none")


def plot(res: Result, path: Path, *, replicates: int = 200) -> Path:
    """E against cluster size, one panel per fault kind, bands shaded."""
    sizes = res.cluster.gpus
    grid = sorted({*sizes, *(round(float(x)) for x in np.geomspace(min(sizes), max(sizes), GRID))})
    dense = build(
        res.run,
        replace(res.cluster, gpus=tuple(grid)),
        res.scaling,
        inputs=res.inputs,
        control=res.control,
        replicates=replicates,
    )
    faults = list(dict.fromkeys(p.point.fault for p in dense.projections))
    colours = {st: f"C{k % 10}" for k, st in enumerate(dict.fromkeys(p.point.strategy for p in dense.projections))}
    fig = Figure(figsize=(6.4 * len(faults), 8.0))
    axes = fig.subplots(2, len(faults), squeeze=False, sharex=True)
    for col, fault in enumerate(faults):
        top, low = axes[0][col], axes[1][col]
        missing = []
        for p in (q for q in dense.projections if q.point.fault == fault):
            if p.point.reason:
                missing.append(f"{p.point.strategy}: {p.point.reason}")
                continue
            colour, x = colours[p.point.strategy], [c.gpus for c in p.cells]
            marks = [c for c in p.cells if c.gpus in sizes]
            for ax, f in ((top, _pct), (low, _lost)):
                ax.fill_between(x, [f(c.low) for c in p.cells], [f(c.high) for c in p.cells], color=colour, alpha=0.2)
                ax.plot(x, [f(c.effective) for c in p.cells], color=colour, label=p.point.strategy)
                ax.plot([c.gpus for c in marks], [f(c.effective) for c in marks], "o", color=colour, ms=4)
        top.set_title(f"fault: {fault}")
        top.set_ylabel("effective training time (% of wall time)")
        _lost_scale(low, [c for p in dense.projections if p.point.fault == fault for c in p.cells])
        low.set_xlabel("GPUs in the job")
        for ax in (top, low):
            ax.set_xscale("log")
            ax.grid(True, which="both", alpha=0.3)
        top.legend(fontsize=8, loc="lower left")
        if missing:
            low.text(
                0.0, -0.22, "no projection: " + "; ".join(missing), transform=low.transAxes, fontsize=7, color="#a00"
            )
    fig.suptitle(
        f"Projected from {res.run.tag}; band: 5-95 % bootstrap"
        + (", and down to the control plane as measured on 2 cores" if res.control is not None else "")
        + ("" if res.scaling or res.control else " (phases assumed constant; no scale run)"),
        fontsize=9,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", facecolor="white")
    return path


def headline(res: Result) -> str:
    """The first line: where the control plane's growth came from, or that it did not."""
    if res.control is None:
        return (
            "NO SCALE RUN: the control-plane phases (rendezvous, quorum, barriers, membership) are taken as the "
            "failure run measured them at its own size, constant with the job; at thousands of GPUs they are "
            "not (run `ftbench scale`, then project again)."
        )
    if res.cluster.control_plane == "measured":
        return (
            f"Control-plane phases from the scale run {res.control.tag} as measured on its machine's cores (an "
            "upper bound on their time; control_plane = model replays them on a cluster)."
        )
    return (
        f"Control-plane phases from the model of each coordinator on a cluster, calibrated by the scale run "
        f"{res.control.tag}; bands reach down to that run's own curves (its participants on 2 cores)."
    )


def text(res: Result) -> str:
    """What the CLI prints."""
    parts = [
        headline(res),
        "",
        "Effective training time (share of wall time spent training; 90 % bootstrap band"
        + (", and down to the control plane as measured on 2 cores" if res.control is not None else "")
        + f") projected from {res.run.tag}:",
        "",
        text_table(effective_table(res)),
        "",
        "Where the time goes (share of wall time):",
        "",
        text_table(parts_table(res)),
        *_gpu_text(res),
        "",
        "Measured and assumed inputs:",
        "",
        text_table(inputs_table(res)),
        *(f"  {line}" for line in inputs_lines(res)),
        "",
        "Assumptions:",
        *(f"  {line}" for line in lines(res.cluster)),
        *(f"  {line}" for line in res.notes),
    ]
    models = models_lines(res)
    if (res.scaling is not None or res.control is not None) and models:
        parts += ["", "Phase growth models:", *(f"  {m}" for m in models)]
    return "\n".join(parts)


def write(res: Result, out: Path, png: Path) -> Path:
    """``project.md`` beside the plot."""
    md = out / "project.md"
    rel = png.relative_to(out).as_posix() if png.is_relative_to(out) else str(png)
    doc = [
        f"# Effective training time at cluster scale: {res.run.name}",
        "",
        f"**{headline(res)}**",
        "",
        f"Projected from `{res.run.path}`" + (f" with phase growth from `{res.scaling.path}`." if res.scaling else "."),
        "Cells: share of wall time spent training, `estimate [5–95 % bootstrap band]`; `—`: no projection (see note).",
        "",
        markdown(effective_table(res)),
        f"![effective training time against cluster size]({rel})",
        "",
        "## Where the time goes",
        "",
        markdown(parts_table(res)),
        *_gpu_markdown(res),
        "## Measured and assumed inputs",
        "",
        markdown(inputs_table(res)),
        *(f"- {line}" for line in inputs_lines(res)),
        "",
        "## Assumptions",
        "",
        *(f"- {line}" for line in lines(res.cluster)),
        *(f"- {line}" for line in res.notes),
        "",
    ]
    models = models_lines(res)
    if (res.scaling is not None or res.control is not None) and models:
        doc += ["## Phase growth models", "", *(f"- {m}" for m in models), ""]
    doc.append("How this is computed: docs/project.md.")
    out.mkdir(parents=True, exist_ok=True)
    md.write_text("\n".join(doc) + "\n")
    return md


def gpu_rows(res: Result) -> list[dict[str, object]]:
    """Per projected point and size: each GPU phase's published seconds, what they were read
    at and what is counted beyond the run's own phase; '-' where the stack skips it."""
    rows: list[dict[str, object]] = []
    for p in res.projections:
        if p.point.reason:
            continue
        for cell in p.cells:
            row: dict[str, object] = {"fault": p.point.fault, "strategy": p.point.strategy, "GPUs": f"{cell.gpus:,}"}
            for part in gpu.GPU_PARTS:
                cost = cell.gpu.get(part)
                row[part] = (
                    "-"
                    if cost is None
                    else f"{gpu.fmt(cost.seconds)} ({cost.over}); counted {gpu.fmt(cost.counted)}, "
                    f"{100 * cell.shares.get(part, 0.0):.2f} %"
                )
            rows.append(row)
    return rows


def gpu_lines(res: Result) -> list[str]:
    """What the GPU phases are, where their figures come from, and who pays them."""
    c = res.cluster
    if not c.gpu_phases:
        return [
            "GPU phases left out (gpu_phases = false): a projection of what the CPU run measured alone, to compare "
            "with; a GPU cluster's recovery also initialises communicators, reads checkpoints from storage and "
            "waits for hosts."
        ]
    sizes = c.gpus
    out = [
        "Assumed from published figures, not measured here (--set gpu_phases=false leaves them out). Each counts "
        "beyond the run's own phase that does the same work (group formation, restore): the longer is what a "
        "cluster waits.",
        "comm_init: "
        + ", ".join(f"{gpu.comm_init_s(c, n):.3g} s over {n:,} GPUs" for n in sizes)
        + f" ({c.comm_init_growth} through {gpu.points(c.comm_init_at, 'GPUs')}"
        + f"{gpu.beyond(c.comm_init_at, max(sizes))})",
        "storage_load: "
        + ", ".join(f"{gpu.load_s(c, n, n):.3g} s for {n:,} GPUs" for n in sizes)
        + f" (each GPU's {gpu.state_per_gpu(c, max(sizes)) / 1e9:.3g} GB at {max(sizes):,}"
        + (" (Llama 3's largest per GPU: set model_params or state_bytes_per_gpu)" if c.state_bytes(1) is None else "")
        + f", read together at {c.storage_read_gb_s:g} GB/s)",
        "host_start: "
        + ", ".join(f"{gpu.host_start_s(c, c.hosts(n)):.3g} s for {c.hosts(n):,} hosts" for n in sizes)
        + f" ({c.host_start_growth} through {gpu.points(c.host_start_at, 'hosts')}"
        + f"{gpu.beyond(c.host_start_at, c.hosts(max(sizes)))})",
    ]
    seen = dict.fromkeys(p.point.strategy for p in res.projections if not p.point.reason)
    for st in seen:
        pays = gpu.PAYS.get(st)
        out.append(
            f"{st}: {pays.why}"
            if pays
            else f"{st}: no GPU phases declared for it (bench/project/gpu.py PAYS), so it pays none: flattering"
        )
    return out
