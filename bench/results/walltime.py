"""Where a trial's wall time goes: consecutive parts of its critical path.

A trial's cost to the person running the benchmark is its wall time, and most of it is
not the steps being measured. Each part runs from one boundary to the next, all stamped
on the harness's CLOCK_MONOTONIC (ranks on this host stamp the same clock; a missing
boundary leaves its part empty and the next part starts from the last one that exists,
so the parts present always add up to ``trial_wall_s``):

- ``wall_launch_s``: ``trial_start`` to the first rank's ``proc_start`` (the
  store, the stack's own services such as a lighthouse or an agent, process creation);
- ``wall_import_s``: to the last rank's first process's ``import_done`` (interpreters starting
  and importing torch and the stack);
- ``wall_setup_s``: to the start of the first step (rendezvous, process groups, model);
- ``wall_warmup_s``: to the end of the last warm-up step (``workload.warmup_steps``);
- ``wall_steps_s``: to the job's last rank event (the measured steps, the fault, the
  recovery, the replacements' start-up);
- ``wall_drain_s``: to ``trial_end`` (the harness sees the job over, sweeps its
  processes, undoes the faults, reads the kernel's log);
- ``wall_analysis_s``: to the end of ``trial_wall_s`` (reading the event logs back and
  deriving the figures).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench.procs.events import Event

WALL_PARTS: tuple[str, ...] = (
    "wall_launch_s",
    "wall_import_s",
    "wall_setup_s",
    "wall_warmup_s",
    "wall_steps_s",
    "wall_drain_s",
    "wall_analysis_s",
)
"""Columns of trials.csv, in critical-path order."""


def wall_parts(events: Sequence[Event], *, wall_s: float, warmup_steps: int) -> dict[str, float]:
    """The parts of one trial (NaN where a boundary is missing)."""
    start = _first(e["t"] for e in events if e["event"] == "trial_start" and e.get("src") == "harness")
    if start is None:
        return dict.fromkeys(WALL_PARTS, math.nan)
    first: dict[Any, Event] = {}  # each rank's first process (a restarted worker may say "initial" too)
    for e in events:
        rank = e.get("rank")
        if e["event"] == "proc_start" and e.get("src") == "rank" and (rank not in first or e["t"] < first[rank]["t"]):
            first[rank] = e
    procs = [e["t"] for e in first.values()]
    pids = {(e.get("rank"), e.get("pid")) for e in first.values()}
    imports = [
        e["t"]
        for e in events
        if e["event"] == "import_done" and e.get("src") == "rank" and (e.get("rank"), e.get("pid")) in pids
    ]
    steps = [e for e in events if e["event"] == "step_end"]
    firsts = [e["t"] - int(float(e["step_s"]) * 1e9) for e in steps if int(e["step"]) == 1]
    warm = [e["t"] for e in steps if int(e["step"]) == warmup_steps]
    rank_events = [e["t"] for e in events if e.get("src") == "rank"]
    end = _first(e["t"] for e in events if e["event"] == "trial_end" and e.get("src") == "harness")
    bounds = [
        min(procs, default=None),
        max(imports, default=None) if len(imports) == len(pids) else None,
        min(firsts, default=None),
        max(warm, default=None) if warmup_steps > 0 else None,
        max(rank_events, default=None),
        end,
        start + int(wall_s * 1e9) if end is not None and not math.isnan(wall_s) else None,
    ]
    out: dict[str, float] = {}
    last = start
    for name, bound in zip(WALL_PARTS, bounds, strict=True):
        if bound is None or bound < last:
            out[name] = math.nan
            continue
        out[name] = (bound - last) / 1e9
        last = bound
    return out


def wall_summary(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per point label: the median of each part over its trials (the fault-free
    reference apart, as ``<label> (reference)``), and the median trial wall time."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if int(r.get("fault_index") or 0) > 0:
            continue  # one row per trial: a trial's later faults repeat its figures
        name = f"{r.get('label', '')} (reference)" if r.get("reference") else str(r.get("label", ""))
        groups.setdefault(name, []).append(r)
    out: dict[str, dict[str, float]] = {}
    for name, group in groups.items():
        out[name] = {}
        for col in ("trial_wall_s", *WALL_PARTS):
            values = [float(v) for r in group if isinstance(v := r.get(col), int | float) and not math.isnan(v)]
            if values:
                out[name][col] = round(statistics.median(values), 4)
    return out


def _first(values: Iterable[int]) -> int | None:
    return min(values, default=None)
