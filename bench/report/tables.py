"""The report's tables as pandas frames, and their Markdown and HTML renderings.

Every latency cell reads ``median [low, high] (n)``: the median, the distribution-free
95 % confidence interval of the median where ``n`` allows one (n >= 6), and the number
of trials it rests on. A figure no trial has is ``-``, never 0.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Collection
from typing import Any

import pandas as pd

from bench.report.series import Series
from bench.results.agreement import judge
from bench.results.reader import Run
from bench.results.stats import describe, median
from bench.scenario.figures import FAULT_FIGURES, figure, phase_name

#: The latencies every report shows, even where no trial has them (then as ``-``).
LATENCIES = ("ttd_s", "ttd_all_s", "ttr_s", "downtime_s")


def seconds(v: float) -> str:
    if math.isnan(v):
        return "-"
    if v == 0:
        return "0"
    return f"{v * 1e3:.3g} ms" if abs(v) < 1 else f"{v:.4g} s"


def size(v: float) -> str:
    for unit in ("B", "kB", "MB"):
        if abs(v) < 1000:
            return f"{v:.3g} {unit}"
        v /= 1000
    return f"{v:.3g} GB"


def _general(v: float) -> str:
    return f"{v:.3g}"


def _cell(values: list[float], unit: str) -> str:
    s = describe(values)
    if s.n == 0:
        return "-"
    fmt: Callable[[float], str] = {"s": seconds, "bytes": size}.get(unit, _general)
    ci = f" [{fmt(s.ci.low)}, {fmt(s.ci.high)}]" if s.ci.exists else ""
    return f"{fmt(s.median)}{ci} (n={s.n})"


def reduced_cell(
    values: list[float], fmt: Callable[[float], str], reduce: Callable[[list[float]], float] = median
) -> str:
    """``value (n=N)`` of the values that exist, reduced (the median unless told), or ``-``."""
    present = [v for v in values if not math.isnan(v)]
    return f"{fmt(reduce(present))} (n={len(present)})" if present else "-"


def summary(series: list[Series]) -> pd.DataFrame:
    """One row per series: outcomes, then each figure's median, CI and n. The latencies
    always have a column; other figures only where some trial has them."""
    shown = [m for m in FAULT_FIGURES if m in LATENCIES or any(s.values(m) for s in series)]
    rows = []
    for s in series:
        row: dict[str, Any] = {
            "point": s.name,
            "strategy": s.strategy,
            "trials": int(s.rows()["trial"].nunique()),
            "outcomes": s.outcomes_text(),
        }
        for m in shown:
            row[m] = _cell(s.values(m), figure(m).unit)
            if m == "ttr_s":
                row["p95 ttr_s"] = seconds(describe(s.values("ttr_s")).p95)
        rows.append(row)
    return pd.DataFrame(rows)


def phases(series: list[Series]) -> pd.DataFrame:
    """Median (n) of every phase per series, columns in the order the phases happen."""
    order: list[str] = []
    for s in series:
        order += [c for c in s.run.phase_columns() if c not in order]
    rows = []
    for s in series:
        row: dict[str, Any] = {"point": s.name}
        for c in order:
            row[phase_name(c)] = _cell(s.values(c), "s")
        rows.append(row)
    return pd.DataFrame(rows)


def environment(runs: list[Run], tags: list[str] | None = None) -> pd.DataFrame:
    """What each run ran on: suite, commit, versions, machine, knobs, clock, command;
    one column per run, headed by its tag."""
    keys: list[str] = []
    table: list[dict[str, str]] = []
    for run in runs:
        info = run.info
        entries: dict[str, str] = {
            "run": run.tag,
            "scenario": run.name,
            "created": str(info.get("created", "")),
            "status": str(info.get("status", "")),
            "ftbench commit": str(info.get("commit", "")),
            "trials per point": str(info.get("trials", "")),
        }
        for k, v in (info.get("versions") or {}).items():
            entries[f"version: {k}"] = "-" if v is None else str(v)
        for k, v in (info.get("machine") or {}).items():
            entries[f"machine: {k}"] = _show(v)
        knobs = info.get("knobs") or {}
        entries["knobs (environment)"] = ", ".join(f"{k}={v}" for k, v in knobs.items()) or "none set"
        for k, v in (info.get("strategy_versions") or {}).items():
            entries[f"strategy {k}"] = _show(v)
        for spec, v in (info.get("environments") or {}).items():  # ftbench run --env
            entries[f"environment {spec or '(harness)'}"] = _show(v)
        clock = info.get("clock") or {}
        entries["clock"] = f"{clock.get('implementation', '-')}, resolution {clock.get('resolution_s', '-')} s"
        entries["command"] = " ".join(map(str, info.get("command") or []))
        table.append(entries)
        keys += [k for k in entries if k not in keys]
    heads = [t or f"run {i + 1}" for i, t in enumerate(tags or [""] * len(runs))] if len(runs) > 1 else ["value"]
    frame = pd.DataFrame(
        {head: [t.get(k, "-") for k in keys] for head, t in zip(heads, table, strict=True)}, index=keys
    )
    frame.index.name = "item"
    return frame.reset_index()


def scenario_points(runs: list[Run]) -> pd.DataFrame:
    """Each point's swept values and hash, so a label can be traced to its config."""
    rows = []
    for run in runs:
        for p in run.points():
            values = ", ".join(f"{k}={v}" for k, v in (p.get("values") or {}).items()) or "(no sweep)"
            rows.append(
                {"run": run.tag, "point": p["label"], "swept values": values, "point_hash": p["point_hash"][:12]}
            )
    return pd.DataFrame(rows)


def _show(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True) if v else "-"
    if isinstance(v, int) and not isinstance(v, bool) and v > 1 << 30:
        return f"{v / (1 << 30):.1f} GiB"
    return "-" if v is None else str(v)


def markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (pandas' own needs the optional tabulate)."""
    if df.empty:
        return "_(no rows)_\n"
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(_md(c) for c in cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(_md(_text(v)) for v in row) + " |")
    return "\n".join(lines) + "\n"


def text_table(df: pd.DataFrame, right: Collection[str] = ()) -> str:
    """Aligned columns for a terminal; the columns named in ``right`` (numbers) are
    right-aligned, heading included, so that their digits line up."""
    if df.empty:
        return "(no rows)"
    cols = [str(c) for c in df.columns]
    cells = [[str(v) for v in row] for row in df.itertuples(index=False)]
    width = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if c in right else v.ljust(w) for v, w, c in zip(values, width, cols, strict=True)
        ).rstrip()

    return "\n".join([line(cols), *(line(r) for r in cells)])


def html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p><em>(no rows)</em></p>"
    return df.to_html(index=False, escape=True, border=0, classes="tbl", na_rep="-")


def _text(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return str(v)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def escape(text: str) -> str:
    return html.escape(text)


def calibration(cal: dict[str, Any]) -> pd.DataFrame:
    """One row per case and figure, and one per instrument probe."""
    rows = []
    for c in cal.get("comparisons", []):
        show = seconds if c.get("unit", "s") == "s" else (lambda v: "-" if math.isnan(v) else f"{v:.1f} steps")
        num = {k: math.nan if c.get(k) is None else float(c[k]) for k in _CALIBRATION_NUMBERS}
        n = min(c["n_bare"], c["n_ftbench"])
        rows.append(
            {
                "case": c["case"],
                "figure": c["figure"],
                "n": n,
                "reference": show(num["bare_median_s"]),
                "ftbench": show(num["ftbench_median_s"]),
                "diff": show(num["diff_s"]),
                "95 % CI of diff": f"[{show(num['ci_low_s'])}, {show(num['ci_high_s'])}]",
                "tolerance": show(num["tolerance_s"]),
                "verdict": _calibration_verdict(c, num, n),
            }
        )
    for name, p in (cal.get("probes") or {}).items():
        rows.append(
            {
                "case": f"probe: {name.replace('_', ' ')}",
                "n": p["n"],
                "reference": "",
                "ftbench": f"median {seconds(p['median_s'])}, max {seconds(p['max_s'])}",
            }
        )
    return pd.DataFrame(rows)


_CALIBRATION_NUMBERS = ("bare_median_s", "ftbench_median_s", "diff_s", "ci_low_s", "ci_high_s", "tolerance_s")
"""A comparison's numbers in run.json (None where a side had no value)."""


def _calibration_verdict(c: dict[str, Any], num: dict[str, float], n: int) -> str:
    """The verdict the run recorded; for a run made before verdicts were recorded (its
    comparisons carry ``ok``, the median's old pass/fail), the verdict its interval gives
    by today's rule, so that old and new runs read alike."""
    if "verdict" in c:
        note = c.get("verdict_note")
        return str(c["verdict"]) + (f" ({note})" if note else "")
    a = judge(num["diff_s"], num["ci_low_s"], num["ci_high_s"], num["tolerance_s"], n)
    return a.verdict + (f" ({a.note()})" if a.note() else "")


def host_clocks(runs: list[Run]) -> pd.DataFrame | None:
    """Multi-host runs: per run, point and host, the clock offset to the harness's and
    its uncertainty (the largest over the trials), and the largest clock uncertainty the
    point's cross-host figures carry (``ttd_err_s``, ``clock_err_s`` of trials.csv); None
    when no run had hosts with clocks of their own (docs/multihost.md)."""
    rows: list[dict[str, object]] = []
    for run in runs:
        for point, trials in (run.info.get("host_clocks") or {}).items():
            hosts = sorted({h for per in trials.values() for h in per})
            of_point = run.trials[run.trials["point_hash"] == point] if "point_hash" in run.trials else run.trials
            worst = {
                col: float(pd.to_numeric(of_point[col], errors="coerce").max()) * 1e3 if col in of_point else math.nan
                for col in ("ttd_err_s", "clock_err_s")
            }
            for h in hosts:
                offsets = [int(per[h]["offset_ns"]) for per in trials.values() if h in per]
                errs = [int(per[h]["err_ns"]) for per in trials.values() if h in per]
                rows.append(
                    {
                        "run": run.tag,
                        "point": point[:12],
                        "host": h,
                        "offset_s": f"{offsets[-1] / 1e9:.6f}",
                        "uncertainty_us (max)": f"{max(errs) / 1e3:.1f}",
                        "ttd_err_ms (max)": f"{worst['ttd_err_s']:.3f}",
                        "clock_err_ms (max)": f"{worst['clock_err_s']:.3f}",
                    }
                )
    return pd.DataFrame(rows) if rows else None
