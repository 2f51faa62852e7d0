"""The first table ``ftbench run`` prints: per point only the figures that exist for its
outcomes, in fixed-width columns under a units row (as nccl-tests prints its sizes), and
under it one plain line per point saying what happened, and when.

A run records some thirty figures per fault; most are ``-`` for a given outcome (a job
that stopped has no recovery, a stack that moves no state no restore), and the two
facts a newcomer wants (how soon the fault was noticed, how soon the job trained again)
were buried among them. This table shows detection, recovery, what was lost and where
the downtime went; ``ftbench run --all-figures``, ``ftbench report`` and trials.csv keep
every figure.

Everything here is read back from the run directory (:mod:`bench.results.reader`): a
cell is the median over the point's faults that have the figure, marked with how many
do where that is not all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from bench.report.tables import seconds, text_table
from bench.results.reader import Run
from bench.results.stats import median
from bench.scenario.figures import OUTCOMES, figure, outcomes_text, phase_column, phase_name

#: The figures of the first table, before the phases: detection, recovery, what was lost.
FIRST_FIGURES = ("ttd_s", "ttd_all_s", "ttr_s", "downtime_s", "steps_lost", "goodput")
#: The detect phase is ttd_s itself: the table shows it once, as ttd.
DETECT = phase_column("detect")
#: How close (s) a step of steps.csv must end to injection + downtime to be the first good step.
SAME_MOMENT_S = 1e-6

UNIT_FORMATS: dict[str, Callable[[float], str]] = {
    "ms": lambda v: f"{v * 1e3:.1f}",
    "s": lambda v: f"{v:.3f}",
    "%": lambda v: f"{v * 100:.1f}",
    "steps": lambda v: f"{v:.0f}" if v == int(v) else f"{v:.1f}",
}


def first_table(run: Run) -> str:
    """The table and its plain lines; empty if the run has no fault trials."""
    points = list(run.measured_points())
    if not points:
        return ""
    frame, numbers = table(run)
    lines = [plain_line(run, p, df) for p, df in points]
    return text_table(frame, right=numbers) + "\n\n" + "\n".join(lines)


def table(run: Run) -> tuple[pd.DataFrame, list[str]]:
    """The table's cells, the units row first, and the names of its number columns: a
    figure has a column where some point has it."""
    points = list(run.measured_points())
    frame = pd.DataFrame(
        {
            "point": ["", *(str(p["label"]) for p, _ in points)],
            "outcome": ["", *(outcomes_text(run.outcomes(p["point_hash"])) for p, _ in points)],
        }
    )
    numbers: list[str] = []
    for col in (*FIRST_FIGURES, *(c for c in run.phase_columns() if c != DETECT)):
        values = [run.values(p["point_hash"], col) for p, _ in points]
        if not any(values):
            continue
        unit = _unit(col, values)
        head = phase_name(col) if col.startswith("phase_") else col.removesuffix("_s")
        frame[head] = [f"({unit})", *(_cell(v, len(df), unit) for v, (_, df) in zip(values, points, strict=True))]
        numbers.append(head)
    return frame, numbers


def _unit(col: str, values: list[list[float]]) -> str:
    """One unit per column: ms where every point's median is under a second."""
    unit = figure(col).unit
    if unit == "s":
        return "ms" if all(abs(median(v)) < 1 for v in values if v) else "s"
    return {"ratio": "%"}.get(unit, unit)


def _general(v: float) -> str:
    return f"{v:.3g}"


def _cell(values: list[float], faults: int, unit: str) -> str:
    if not values:
        return "-"
    text = UNIT_FORMATS.get(unit, _general)(median(values))
    return text if len(values) == faults else f"{text} ({len(values)})"


def plain_line(run: Run, point: dict[str, Any], df: pd.DataFrame) -> str:
    """``label: what happened, and when (how many trials it happened in)``, from the
    point's medians."""
    h = point["point_hash"]
    med = {f: median(v) for f in FIRST_FIGURES if (v := run.values(h, f))}
    counts = run.outcomes(h)
    order = [o.name for o in OUTCOMES]
    ranked = sorted(counts, key=lambda o: (-counts[o], order.index(o) if o in order else len(order)))
    total = sum(counts.values())
    noun = "trials" if total == df["trial"].nunique() else "faults"
    tally = f"{ranked[0]} in {counts[ranked[0]]} of {total} {noun}" + "".join(
        f", {o} in {counts[o]}" for o in ranked[1:]
    )
    what = _what(ranked[0], _fault(df), med, _world_after(run, h, df))
    return f"{point['label']}: {what} ({tally})"


def _what(outcome: str, fault: str, med: dict[str, float], ranks: int | None) -> str:
    """What happened to the point's typical trial, in words."""
    noticed = f"{fault} was noticed after {seconds(med['ttd_s'])}" if "ttd_s" in med else ""
    if outcome == "recovered":
        again = f"training again {seconds(med['ttr_s'])} later" if "ttr_s" in med else "training again"
        again += f" in {ranks} rank{'s' if ranks > 1 else ''}" if ranks else ""
        lost = med.get("steps_lost")
        if lost is not None:
            again += ", no step lost" if lost == 0 else f", {UNIT_FORMATS['steps'](lost)} steps lost"
        return f"{noticed}; {again}" if noticed else again
    if outcome == "failed":
        if not noticed:
            return f"nothing noticed {fault}, and the job stopped"
        every = f" (by every survivor after {seconds(med['ttd_all_s'])})" if "ttd_all_s" in med else ""
        return f"{noticed}{every}; then the job stopped"
    if outcome == "false_alarm":
        return f"{noticed or fault + ' was noticed'}, though it ended within the job's timeout: a false alarm"
    if outcome == "hung":
        return f"{noticed}; then the job hung until the trial's deadline" if noticed else "the job hung"
    return {
        "absorbed": f"nothing noticed {fault}, and the job trained on",
        "corrupted": f"nothing noticed {fault}, and the job ended with wrong parameters",
        "not_injected": f"{fault} never came (its trigger was not reached, or no target was left)",
        "completed": "no fault: the job ran to its end",
    }.get(outcome, outcome)


def _fault(df: pd.DataFrame) -> str:
    """``the kill of rank 2``; ``each fault (kill, stall)`` where the point has several."""
    kinds = df["fault"].fillna("").astype(str) if "fault" in df else pd.Series([""] * len(df))
    targets = df["target"].fillna("").astype(str) if "target" in df else pd.Series([""] * len(df))
    pairs = sorted(set(zip(kinds, targets, strict=True)))
    if len(pairs) != 1:
        return f"each fault ({', '.join(sorted({k for k, _ in pairs}))})"
    kind, target = pairs[0]
    if not target:
        return f"the {kind}"
    if target.replace(",", "").isdigit():
        return f"the {kind} of rank{'s' if ',' in target else ''} {target}"
    return f"the {kind} of the {target}"


def _world_after(run: Run, point_hash: str, df: pd.DataFrame) -> int | None:
    """The world that ran the first good step (median over recovered faults): the rows
    of steps.csv that end at injection + downtime, the injection being
    ``inject_after_s`` past the trial's first step. None where steps.csv cannot say."""
    steps = run.point_steps(point_hash)
    if steps.empty or "world_size" not in steps:
        return None
    steps = steps[~steps["reference"]]
    sizes: list[float] = []
    for r in df[df["outcome"] == "recovered"].to_dict("records"):
        after, down = float(r.get("inject_after_s", math.nan)), float(r.get("downtime_s", math.nan))
        trial = steps[steps["trial"] == r["trial"]]
        if trial.empty or math.isnan(after) or math.isnan(down):
            continue
        t_good = float(trial["t_s"].min()) + after + down
        near = trial[(trial["t_s"] - t_good).abs() < SAME_MOMENT_S]
        size = float(pd.to_numeric(near["world_size"], errors="coerce").max()) if not near.empty else math.nan
        if size > 0:
            sizes.append(size)
    return round(median(sizes)) if sizes else None
