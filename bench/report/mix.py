"""The report's section for runs whose faults are a failure mix (``trigger.share``):
per stack, the faults it met by entry and what became of each.

Every stack of such a run met the same schedule (:mod:`bench.scenario.mix`), so the
rows of one entry differ between stacks only by what the stack made of it. A firing
that found no live process to hit (a restart under way) is counted as skipped: it is
part of the schedule the stack met, not a fault it recovered from. Counts come from
trials.csv's rows (one per injection) and the harness's ``inject_skipped`` events.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from bench.report.blocks import Report
from bench.report.tables import seconds
from bench.results.reader import Run
from bench.scenario import mix

#: Outcome of the row an entry gets when it never fired (not a fault the stack met).
NEVER = ("not_injected",)


def section(rep: Report, runs: list[Run]) -> None:
    """Add the section for every run with a failure mix."""
    for run in runs:
        table = met(run)
        if table is None:
            continue
        rep.add("h2", "Failure mix: faults met per stack")
        rep.add(
            "p",
            f"`{run.tag}`: every stack met the same seeded schedule (`trigger.share`, docs/failure-mix.md). "
            "`share` is the entry's normalised share of the arrivals; `injected` the firings that hit a process, "
            "`skipped` those that found none alive (a recovery under way); `outcomes` counts the injected "
            "firings by outcome, and `downtime_s` is their median [min-max]. A stack that stopped at its "
            "first fault (failstop) meets nothing after it.",
        )
        rep.add("table", table=table)


def met(run: Run) -> pd.DataFrame | None:
    """Stack x mix entry: share, injected, skipped, outcomes and downtime; None when no
    point of the run has a mix."""
    rows: list[dict[str, Any]] = []
    for p, df in run.measured_points():
        h = p["point_hash"]
        faults = p.get("config", {}).get("faults") or []
        found = mix.from_config(faults)
        if found is None:
            continue
        shares = found.normalised()
        skipped = _skipped(run, h, df)
        stack = str(df["strategy"].iloc[0]) if "strategy" in df else str(p.get("label", h[:12]))
        for m in found.members:
            mine = df[(df["fault_index"].astype(int) == m.index) & ~df["outcome"].isin(NEVER)]
            down = [float(v) for v in mine.get("downtime_s", pd.Series(dtype=float)) if not math.isnan(float(v))]
            counts = Counter(str(o) for o in mine["outcome"])
            rows.append(
                {
                    "stack": stack,
                    "entry": f"faults.{m.index} {describe(faults[m.index])}",
                    "share": f"{100.0 * shares[m.index]:.1f} %",
                    "injected": len(mine),
                    "skipped": skipped.get(m.index, 0),
                    "outcomes": ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "-",
                    "downtime_s": _spread(down),
                }
            )
    return pd.DataFrame(rows) if rows else None


def describe(fault: Mapping[str, Any]) -> str:
    """An entry in a few words: its kind and the knobs that make it what it is."""
    params = fault.get("params") or {}
    knobs = ", ".join(f"{k} {v}" for k, v in params.items() if k in ("signal", "duration_s", "grace_s", "size_mb"))
    return f"{fault.get('kind', '?')} ({knobs})" if knobs else str(fault.get("kind", "?"))


def _skipped(run: Run, point_hash: str, df: pd.DataFrame) -> Counter[int]:
    """Firings of each entry that found no live process, over the point's trials."""
    out: Counter[int] = Counter()
    for trial in sorted({str(t) for t in df["trial"]}):
        path: Path = run.events_dir(point_hash, trial) / "harness.jsonl"
        if not path.exists():
            continue
        with path.open() as fh:
            for line in fh:
                if '"inject_skipped"' not in line:
                    continue
                try:
                    e = json.loads(line)
                except json.JSONDecodeError:  # a torn last line of a killed harness
                    continue
                out[int(e.get("fault", -1))] += 1
    return out


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{seconds(statistics.median(values))} [{seconds(min(values))}-{seconds(max(values))}]"
