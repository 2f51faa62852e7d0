"""What a report plots: one *series* per point of every run, named so a reader can tell
them apart, with one colour that it keeps in every figure.

With one run a series is named by its point label (``strategy=reinit``). With several
runs of the same scenario (another torch, another knob) the label alone is ambiguous,
so each run gets a tag from what differs between the runs: a version, a knob or a
configuration value, and the run directory's name only when nothing else differs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from bench.procs.events import read_events
from bench.results.reader import Run, flatten
from bench.scenario.figures import outcomes_text, phase_name
from bench.scenario.loader import known_phases

#: Colour-blind-safe qualitative palette (Okabe-Ito), then matplotlib's tab10.
PALETTE = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#000000",
    "#882255",
    "#117733",
    "#999933",
    "#332288",
    "#AA4499",
    "#44AA99",
    "#8c564b",
)
#: Line styles and markers that tell apart series of one colour (see build_series).
STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))
#: Phase colours: one per phase name, stable across reports.
PHASE_COLOURS = {
    "detect": "#D55E00",
    "isolate": "#E69F00",
    "reconfigure": "#0072B2",
    "restore": "#009E73",
    "catchup": "#CC79A7",
}
#: Phases other strategies add (restart: agent, teardown, spawn, import...), one each in
#: the order of :func:`bench.scenario.loader.known_phases`: hues apart from the five above
#: (Paul Tol's muted and light palettes, then matplotlib's tab20 darks), never repeated
#: while there are fewer phases than colours.
EXTRA_PHASE_COLOURS = (
    "#88CCEE",
    "#332288",
    "#DDCC77",
    "#882255",
    "#999933",
    "#8c564b",
    "#117733",
    "#AA4499",
    "#44AA99",
    "#997700",
    "#BBBBBB",
    "#6699CC",
    "#EE8866",
    "#1f77b4",
    "#bcbd22",
    "#7f7f7f",
    "#17becf",
    "#e377c2",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#5254a3",
    "#9467bd",
    "#ad494a",
)


@dataclass(frozen=True)
class Series:
    run: Run
    point_hash: str
    label: str
    name: str
    colour: str
    strategy: str
    linestyle: str = "-"
    marker: str = "o"

    def values(self, metric: str) -> list[float]:
        return self.run.values(self.point_hash, metric)

    def rows(self) -> pd.DataFrame:
        return self.run.measured(self.point_hash)

    def outcomes_text(self) -> str:
        return outcomes_text(self.run.outcomes(self.point_hash))


def phase_colour(column: str) -> str:
    """One colour per phase name, the same in every plot of every report."""
    name = phase_name(column)
    if name in PHASE_COLOURS:
        return PHASE_COLOURS[name]
    extras = [p for p in known_phases() if p not in PHASE_COLOURS]
    if name in extras:
        return EXTRA_PHASE_COLOURS[extras.index(name) % len(EXTRA_PHASE_COLOURS)]
    return "#999999"  # a phase no registered strategy declares (an old run's)


def run_tags(runs: list[Run]) -> list[str]:
    """One short tag per run from the values that differ between the runs."""
    if len(runs) < 2:
        return [""] * len(runs)
    flat = []
    for r in runs:
        items: dict[str, Any] = {}
        items.update({f"versions.{k}": v for k, v in flatten(r.info.get("versions") or {}).items()})
        items.update({f"knobs.{k}": v for k, v in (r.info.get("knobs") or {}).items()})
        pts = r.info.get("points") or [{}]
        items.update(flatten(pts[0].get("config") or {}))
        if len({p.get("label") for p in pts}) == 1 and len(runs) > 1:
            items["scenario"] = r.name
        flat.append(items)
    keys = sorted({k for f in flat for k in f})
    varying = [k for k in keys if len({repr(f.get(k)) for f in flat}) > 1]
    if not varying or len(varying) > 3:
        names = [r.name for r in runs]
        if len(set(names)) == len(names):
            return names
        return [f"run {i + 1}" for i in range(len(runs))]
    return [" ".join(f"{k.split('.')[-1]}={f.get(k, '-')}" for k in varying) for f in flat]


def build_series(runs: list[Run]) -> list[Series]:
    """Series of every point of every run. When several strategies meet other sweep
    values (compare-strategies: fault x strategy), the colour names the strategy and
    the line style and marker the rest, so that a strategy is one colour throughout;
    otherwise every series has a colour of its own."""
    tags = run_tags(runs)
    found = []
    for run, tag in zip(runs, tags, strict=True):
        for p, rows in run.measured_points():
            strategy = str(rows["strategy"].iloc[0]) if "strategy" in rows else ""
            found.append((run, tag, p, strategy))
    strategies = list(dict.fromkeys(f[3] for f in found))
    by_strategy = 1 < len(strategies) < len(found)
    variants: list[str] = []
    out: list[Series] = []
    for i, (run, tag, p, strategy) in enumerate(found):
        name = f"{tag}: {p['label']}" if tag else p["label"]
        if by_strategy:
            variant = f"{tag}|" + " ".join(w for w in p["label"].split() if not w.startswith("strategy="))
            variants += [variant] if variant not in variants else []
            colour = PALETTE[strategies.index(strategy) % len(PALETTE)]
            linestyle, marker = STYLES[variants.index(variant) % len(STYLES)]
        else:
            colour, (linestyle, marker) = PALETTE[i % len(PALETTE)], STYLES[(i // len(PALETTE)) % len(STYLES)]
        out.append(
            Series(
                run=run,
                point_hash=p["point_hash"],
                label=p["label"],
                name=name,
                colour=colour,
                strategy=strategy,
                linestyle=linestyle,
                marker=marker,
            )
        )
    return out


def representative_trial(series: Series) -> tuple[int | None, str]:
    """The trial whose downtime (else detection time) is closest to the point's median,
    so the timeline shows a typical trial, not the best or the worst; and why."""
    rows = series.rows()
    if rows.empty:
        return None, "no trials"
    for metric in ("downtime_s", "ttd_s"):
        vals = rows[["trial", metric]].dropna() if metric in rows else pd.DataFrame()
        if not vals.empty:
            per_trial = vals.groupby("trial")[metric].max()
            med = per_trial.median()
            trial = int((per_trial - med).abs().sort_values(kind="stable").index[0])
            return trial, f"trial {trial}: {metric} closest to the median of {per_trial.size} trials"
    trial = int(sorted(rows["trial"].unique())[0])
    return trial, f"trial {trial}: no trial has a detection, the first is shown"


@dataclass(frozen=True)
class Span:
    """One shaded phase of a fault: seconds since trial start."""

    column: str
    start: float
    end: float


@dataclass(frozen=True)
class TrialMarks:
    injections: list[tuple[float, str]]
    """(seconds since trial start, text) of every injection."""
    spans: list[Span]
    inject_steps: list[int]


def trial_marks(series: Series, trial: int) -> TrialMarks | None:
    """Injection times and phase spans of one trial, from its events and its rows.

    Times are relative to the trial's ``trial_start`` event, the origin of steps.csv's
    ``t_s``. The phases are laid end to end from the injection in the order they
    happen; they add up to the downtime (bench.results.derive)."""
    path = series.run.events_dir(series.point_hash, trial)
    if not path.is_dir():
        return None
    events = read_events(path)
    if not events:
        return None
    start = next((e["t"] for e in events if e["event"] == "trial_start"), events[0]["t"])
    injects = [e for e in events if e["event"] == "inject"]
    rows = series.rows()
    rows = rows[rows["trial"] == trial]
    order = series.run.phase_columns(series.point_hash)
    marks = TrialMarks(injections=[], spans=[], inject_steps=[])
    for inj in injects:
        t = (inj["t"] - start) / 1e9
        text = f"inject {inj.get('kind', '')} rank {','.join(map(str, inj.get('ranks', [])))}"
        marks.injections.append((t, text.strip()))
        if inj.get("step") is not None:
            marks.inject_steps.append(int(inj["step"]))
        row = rows[rows["fault_index"] == int(inj.get("fault", 0))] if "fault_index" in rows else rows
        if row.empty:
            continue
        boundary = t
        for col in order:
            v = row[col].iloc[0] if col in row else math.nan
            if v is None or math.isnan(v):
                continue
            marks.spans.append(Span(col, boundary, boundary + float(v)))
            boundary += float(v)
    return marks
