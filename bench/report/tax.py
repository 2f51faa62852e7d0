"""The report's section on what each stack costs when nothing fails (a ``resilience-tax`` run).

The table is what a team weighs against the per-failure figures: each stack's step time
and wall time per step over plain DDP's with their bootstrap intervals, its memory, its
bytes on the wire and the processes it adds. The plot shows the two ratios with their
intervals, one row per stack, so that an interval that straddles 1 reads as "no tax
resolved" at a glance.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from bench.report.blocks import Report
from bench.report.plots import save
from bench.report.tables import seconds, size
from bench.results.reader import Run
from bench.results.tax import Tax, strategy_tax


def section(rep: Report, runs: list[Run], plot_dir: Path) -> None:
    """Add the section for every run with fault-free points beside a failstop one."""
    for run in runs:
        taxes = strategy_tax(run)
        if len(taxes) < 2:
            continue
        rep.add("h2", f"Fault-free tax of each stack ({run.tag})")
        rep.add(
            "p",
            "Every stack against plain DDP (`failstop`) on the same workload, no fault injected. `step` is "
            "the ratio of step times, `wall/step` of training wall time per step (it also holds checkpoint "
            "writes and waits between steps): in an interleaved run the median of the per-round ratios "
            "(trial k against failstop's trial k, so that the machine's drift cancels), else the ratio of "
            "the medians; each with a bootstrap 95 % interval. Memory is the kernel's peak resident set "
            "(VmHWM) of a rank and the job's largest resident total at one 0.1 s sample (ranks, the "
            "stack's helpers, the store); on GPU ranks, the largest rank's peaks of torch's allocated and "
            "reserved device memory (the CUDA context's own not included); bytes on the wire are counted at "
            "the hosts' interfaces over the "
            "steady state (`-`: not counted, see docs/results.md). `+procs`/`+threads`: what the stack "
            "adds to failstop's job.",
        )
        rep.add("table", table=table(taxes))
        rep.figure(
            plot(taxes, plot_dir / f"tax_{run.path.name}.png"),
            "Step-time and wall-time-per-step ratios over failstop with their 95 % intervals (1: no tax).",
            "fault-free tax",
        )


def _ratio(value: float, low: float, high: float) -> str:
    if math.isnan(value):
        return "-"
    band = f" [{low:.3f}, {high:.3f}]" if not (math.isnan(low) or low == high) else ""
    return f"{value:.3f}{band}"


def table(taxes: list[Tax]) -> pd.DataFrame:
    base = next((t for t in taxes if t.is_baseline), None)
    rows = []
    for t in taxes:
        m = t.medians
        extra = {
            k: (m[k] - base.medians[k]) if base and not t.is_baseline else math.nan
            for k in ("job_procs", "job_threads")
        }
        rows.append(
            {
                "stack": t.strategy,
                "n": t.n,
                "step": seconds(t.step_s),
                "step ratio": _ratio(t.ratio, t.low, t.high),
                "wall/step ratio": _ratio(t.wall_ratio, t.wall_low, t.wall_high),
                "rank RSS peak": _size(m["rss_rank_peak_bytes"]),
                "job RSS peak": _size(m["rss_job_peak_bytes"]),
                "GPU allocated peak": _size(m["cuda_rank_peak_bytes"]),
                "GPU reserved peak": _size(m["cuda_rank_reserved_peak_bytes"]),
                "wire/step": _size(m["wire_bytes_per_step"]),
                "procs": _count(m["job_procs"]),
                "+procs": _count(extra["job_procs"], signed=True),
                "threads": _count(m["job_threads"]),
                "+threads": _count(extra["job_threads"], signed=True),
                "processes": ", ".join(f"{k} x{v}" for k, v in sorted(t.helpers.items())),
            }
        )
    df = pd.DataFrame(rows)
    # Not measured on this machine: GPU memory off CUDA, the wire without namespaces.
    empty = [c for c in ("GPU allocated peak", "GPU reserved peak", "wire/step") if (df[c] == "-").all()]
    return df.drop(columns=empty)


def _size(v: float) -> str:
    return "-" if math.isnan(v) else size(v)


def _count(v: float, *, signed: bool = False) -> str:
    if math.isnan(v):
        return "-"
    return f"{v:+.0f}" if signed else f"{v:.0f}"


def plot(taxes: list[Tax], path: Path) -> Path | None:
    shown = [t for t in taxes if not math.isnan(t.ratio)]
    if not shown:
        return None
    fig = Figure(figsize=(7.5, 0.55 * len(shown) + 1.4))
    ax = fig.add_subplot()
    for offset, (what, colour) in enumerate((("step", "#1f77b4"), ("wall", "#ff7f0e"))):
        for i, t in enumerate(shown):
            value, low, high = (t.ratio, t.low, t.high) if what == "step" else (t.wall_ratio, t.wall_low, t.wall_high)
            y = i + (offset - 0.5) * 0.3
            err = [[max(0.0, value - low)], [max(0.0, high - value)]] if not math.isnan(low) else None
            ax.errorbar(
                value,
                y,
                xerr=err,
                fmt="o",
                color=colour,
                capsize=3,
                label=("step time" if what == "step" else "wall time per step") if i == 0 else None,
            )
    ax.axvline(1.0, color="#888", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(shown)), [f"{t.strategy} (n={t.n})" for t in shown])
    ax.invert_yaxis()
    ax.set_xlabel("ratio over failstop (fault-free)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=2, fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return save(fig, path)
