"""The report's diagnosis sections: timeouts against false alarms, and hung ranks' stacks.

- **Timeouts without false alarms.** Where trials held ranks for less than the stack's
  detection timeout (``hold_s < tolerance_s``: stalls, stragglers' delays that should be
  absorbed), each timeout setting gets its false-alarm rate (``false_alarm`` outcomes
  over those trials) and the detection latency of the faults past it; one plot draws
  latency against false-alarm rate, and the smallest setting with no false alarm is
  named with the one-sided 95 % Clopper-Pearson upper bound on its rate (0 of n:
  ``1 - 0.05 ** (1 / n)``, about the rule of three's ``3 / n``). Zero false alarms in a
  few trials is weak evidence; the bound says how weak.
- **Stacks of hung ranks.** The ``py-spy dump`` files the harness captured on a detected
  hang (:mod:`bench.run.hangs`), linked relative to the report, and why any failed.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from bench.report.blocks import Report
from bench.report.plots import save
from bench.report.series import PALETTE
from bench.report.tables import seconds
from bench.results.reader import Run
from bench.results.stats import median

CONFIDENCE = 0.95


def upper_bound(k: int, n: int, confidence: float = CONFIDENCE) -> float:
    """One-sided Clopper-Pearson upper bound on a rate seen ``k`` times in ``n``: the p
    at which seeing ``k`` or fewer has probability ``1 - confidence`` (bisection on
    the binomial CDF; for ``k = 0`` it is ``1 - (1 - confidence) ** (1 / n)``)."""
    if n <= 0:
        return math.nan
    if k >= n:
        return 1.0
    alpha = 1 - confidence
    lo, hi = k / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        cdf = sum(math.comb(n, i) * mid**i * (1 - mid) ** (n - i) for i in range(k + 1))
        lo, hi = (mid, hi) if cdf > alpha else (lo, mid)
    return hi


@dataclass(frozen=True)
class Setting:
    """One timeout setting of one strategy in one run."""

    run: Run
    strategy: str
    tolerance_s: float
    key: str
    under: int
    """Trials whose fault ended within the timeout (false-alarm candidates)."""
    alarms: int
    over: int
    """Trials whose fault outlasted the timeout (it should be detected)."""
    ttd: list[float]
    """Detection latencies of those."""

    @property
    def rate(self) -> float:
        return self.alarms / self.under if self.under else math.nan

    @property
    def bound(self) -> float:
        return upper_bound(self.alarms, self.under)


def settings(runs: list[Run]) -> list[Setting]:
    """Every (run, strategy, timeout) whose trials include faults within the timeout."""
    out = []
    for run in runs:
        df = run.measured()
        if df.empty or "tolerance_s" not in df or "hold_s" not in df:
            continue
        df = df[df["tolerance_s"].notna() & df["hold_s"].notna()]
        for (strategy, _), g in df.groupby(["strategy", "tolerance_s"], sort=True):
            tol = float(g["tolerance_s"].iloc[0])
            under = g[g["hold_s"] < tol]
            if under.empty:
                continue
            over = g[g["hold_s"] >= tol]
            ttd = [float(v) for v in over["ttd_s"] if not math.isnan(v)] if "ttd_s" in over else []
            out.append(
                Setting(
                    run=run,
                    strategy=str(strategy),
                    tolerance_s=tol,
                    key=_tolerance_key(run, g),
                    under=len(under),
                    alarms=int((under["outcome"] == "false_alarm").sum()),
                    over=len(over),
                    ttd=ttd,
                )
            )
    return out


def _tolerance_key(run: Run, rows: pd.DataFrame) -> str:
    """The config key of the timeout, as the harness recorded it in the trial's ``trial_start``."""
    row = rows.iloc[0]
    path = run.events_dir(str(row["point_hash"]), int(row["trial"])) / "harness.jsonl"
    try:
        with open(path) as fh:
            for line in fh:
                e = json.loads(line)
                if e.get("event") == "trial_start":
                    return str(e.get("tolerance_key", ""))
    except (OSError, json.JSONDecodeError):
        pass
    return ""


def timeouts(rep: Report, runs: list[Run], plot_dir: Path) -> None:
    """Section: detection latency against false-alarm rate per timeout, and the pick."""
    found = settings(runs)
    if not found:
        return
    rep.add("h2", "Timeouts: detection latency against false alarms")
    rep.add(
        "p",
        "Per detection timeout (the stack's smallest, `tolerance_s`): the share of faults that ended within it "
        "(`hold_s < tolerance_s`: to be absorbed) that the stack declared failed anyway (outcome `false_alarm`), "
        f"with the one-sided {CONFIDENCE:.0%} Clopper-Pearson upper bound, and the time to detect the faults "
        "that outlasted it.",
    )
    rep.add("table", table=_table(found))
    path = _plot(found, plot_dir / "timeouts.png")
    rep.figure(
        path,
        "Median time to detect the faults past each timeout (whiskers: min-max) against the false-alarm rate "
        "of the faults within it (whiskers: up to the 95 % upper bound); each point is labelled with its timeout.",
        "detection latency against false-alarm rate",
    )
    for line in recommendations(found):
        rep.add("p", line)


def _table(found: list[Setting]) -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    for s in found:
        rows.append(
            {
                "strategy": s.strategy,
                "timeout": f"{s.key or 'tolerance'} = {s.tolerance_s:g} s",
                "false alarms": f"{s.alarms} of {s.under}",
                "rate (95 % upper bound)": f"{s.rate:.0%} (≤ {s.bound:.0%})",
                "detected past it": f"{len(s.ttd)} of {s.over}",
                "median ttd_s": seconds(median(s.ttd)) if s.ttd else "-",
            }
        )
    return pd.DataFrame(rows)


def recommendations(found: list[Setting]) -> list[str]:
    """Per strategy: the smallest timeout with no false alarm in the trials run."""
    lines = []
    for strategy in dict.fromkeys(s.strategy for s in found):
        mine = sorted((s for s in found if s.strategy == strategy), key=lambda s: s.tolerance_s)
        clean = [s for s in mine if s.alarms == 0]
        if not clean:
            lines.append(f"**{strategy}**: every timeout tried raised false alarms; none can be recommended.")
            continue
        s = clean[0]
        detected = (
            f"it detected {len(s.ttd)} of {s.over} faults past it, median ttd_s {seconds(median(s.ttd))}"
            if s.over
            else "no fault outlasted it in these trials, so its detection latency is unmeasured"
        )
        lines.append(
            f"**Recommendation ({strategy})**: the smallest setting with no false alarm is "
            f"`{s.key or 'tolerance'}` = {s.tolerance_s:g} s: 0 of {s.under} faults within it declared failed; "
            f"false-alarm rate ≤ {s.bound:.0%} at {CONFIDENCE:.0%} confidence (Clopper-Pearson"
            + (f"; rule of three ≈ {3 / s.under:.0%}" if s.under >= 3 else "")
            + f"); {detected}."
        )
    return lines


def _plot(found: list[Setting], path: Path) -> Path | None:
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    drawn = False
    for i, strategy in enumerate(dict.fromkeys(s.strategy for s in found)):
        mine = sorted((s for s in found if s.strategy == strategy and s.ttd), key=lambda s: s.tolerance_s)
        if not mine:
            continue
        colour = PALETTE[i % len(PALETTE)]
        xs = [s.rate * 100 for s in mine]
        ys = [median(s.ttd) for s in mine]
        yerr = [
            [y - min(s.ttd) for y, s in zip(ys, mine, strict=True)],
            [max(s.ttd) - y for y, s in zip(ys, mine, strict=True)],
        ]
        xerr = [[0.0] * len(mine), [(s.bound - s.rate) * 100 for s in mine]]
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="o-", color=colour, capsize=3, label=strategy)
        for x, y, s in zip(xs, ys, mine, strict=True):
            ax.annotate(
                f"{s.tolerance_s:g} s ({s.alarms}/{s.under})", (x, y), textcoords="offset points", xytext=(6, 4)
            )
        drawn = True
    if not drawn:
        return None
    ax.set_xlabel("false-alarm rate of faults within the timeout, % (whisker: 95 % upper bound)")
    ax.set_ylabel("time to detect faults past it, s")
    ax.set_xlim(-5, 105)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.1)  # room for the labels above the top point
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=9)
    ax.set_title("Detection timeout: latency against false alarms")
    return save(fig, path)


def stack_dumps(rep: Report, runs: list[Run], out: Path) -> None:
    """Section: links to the hung ranks' stacks the harness captured, and failed captures."""
    lines: list[str] = []
    for run in runs:
        labels = {str(p["point_hash"])[:12]: str(p.get("label", "")) for p in run.points()}
        for harness in sorted((run.path / "events").glob("*/*/harness.jsonl")):
            trial_dir = harness.parent
            for e in _stack_events(harness):
                where = f"{labels.get(trial_dir.parent.name, trial_dir.parent.name)}, trial {trial_dir.name}"
                who = f"rank {e.get('of_rank')} (pid {e.get('of_pid')})"
                if e.get("ok") and e.get("file") and (trial_dir / str(e["file"])).exists():
                    rel = Path(os.path.relpath(trial_dir / str(e["file"]), out)).as_posix()
                    lines.append(f"- {where}: [{who}]({rel}), on {e.get('trigger', '')}")
                else:
                    lines.append(f"- {where}: {who} not captured: {e.get('error') or 'unknown error'}")
    if not lines:
        return
    rep.add("h2", "Stacks of hung ranks")
    rep.add(
        "p",
        "Captured by the harness with `py-spy dump --nonblocking` while the hung rank was still stopped or "
        "hung, when the stack detected the hang (or when the hang outlasted its timeout):",
    )
    rep.add("p", "\n".join(lines))


def _stack_events(path: Path) -> list[dict[str, Any]]:
    found = []
    with open(path) as fh:
        for line in fh:
            if '"stack_dump"' in line:
                try:
                    found.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return found
