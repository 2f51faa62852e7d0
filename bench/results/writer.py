"""A run's results directory: ``results/<scenario>/<UTC time>_<commit>/``.

- ``trials.jsonl``: the durable record, one line per fault per finished trial, appended
  the moment a trial ends, so an interrupted run keeps every finished trial and can be
  resumed (``ftbench run --resume DIR``).
- ``trials.csv``: the same rows as a table (rewritten after each trial). Its column
  names are a public interface.
- ``steps.csv``: one row per rank per step of every trial (timelines, loss curves).
- ``events/<point>/<trial>/*.jsonl``: the raw event logs every figure comes from.
- ``run.json``: what ran, on what, and each point's statistics.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.results.derive import FaultFigures, TrialFacts, world_steps
from bench.results.events import Event
from bench.scenario.figures import FAULT_FIGURES, TRIAL_FIGURES, is_phase
from bench.scenario.model import Point

#: Leading columns of trials.csv; the fault's figures, its phases and the rest follow.
ID_COLUMNS = (
    "point_hash",
    "label",
    "strategy",
    "workload",
    "backend",
    "world_size",
    "fault",
    "fault_index",
    "target",
    "mechanism",
    "interposer",
    "trial",
    "seed",
    "reference",
)
TAIL_COLUMNS = (
    "outcome",
    "error",
    "detect_how",
    "detect_site",
    "ff_step_s",
    "steps_done",
    *TRIAL_FIGURES,
    "trial_wall_s",
)
STEP_COLUMNS = (
    "point_hash",
    "label",
    "trial",
    "reference",
    "rank",
    "pid",
    "gen",
    "step",
    "t_s",
    "step_s",
    "world_size",
    "group_rank",
    "loss",
    "loss_share",
    "algbw_gbps",
    "busbw_gbps",
)


@dataclass
class RunDir:
    path: Path

    @classmethod
    def create(cls, out: str | Path, scenario_name: str, commit: str) -> RunDir:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        path = Path(out) / scenario_name / f"{stamp}_{commit}"
        suffix = 1
        while path.exists():
            suffix += 1
            path = Path(out) / scenario_name / f"{stamp}_{commit}-{suffix}"
        path.mkdir(parents=True)
        return cls(path)

    @property
    def trials_jsonl(self) -> Path:
        return self.path / "trials.jsonl"

    def events_dir(self, point: Point, trial: int | str) -> Path:
        return self.path / "events" / point.point_hash[:12] / str(trial)

    def rows(self) -> list[dict[str, Any]]:
        if not self.trials_jsonl.exists():
            return []
        with open(self.trials_jsonl) as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def finished(self) -> set[tuple[str, int, bool]]:
        """(point_hash, trial, reference) of every trial already recorded."""
        return {(r["point_hash"], int(r["trial"]), bool(r.get("reference"))) for r in self.rows()}

    def add_trial(
        self,
        point: Point,
        trial: int,
        *,
        reference: bool,
        backend: str,
        faults: Sequence[FaultFigures],
        facts: TrialFacts,
        wall_s: float,
        events: Sequence[Event],
    ) -> list[dict[str, Any]]:
        s = point.scenario
        rows = []
        for f in faults:
            row: dict[str, Any] = {
                "point_hash": point.point_hash,
                "label": point.label,
                "strategy": s.recovery.strategy,
                "workload": s.workload.kind,
                "backend": backend,
                "world_size": s.workload.world_size,
                "trial": trial,
                "seed": s.measure.seed,
                "reference": reference,
                **f.row(),
                "ff_step_s": facts.ff_step_s,
                "steps_done": facts.steps_done,
                **{name: getattr(facts, name) for name in TRIAL_FIGURES},
                "trial_wall_s": wall_s,
            }
            rows.append(row)
        with open(self.steps_csv, "a", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=STEP_COLUMNS, extrasaction="ignore")
            if fh.tell() == 0:
                writer.writeheader()
            writer.writerows(step_rows(point, trial, reference, events))
        self.add_rows(rows)
        return rows

    def add_rows(self, rows: Sequence[dict[str, Any]]) -> None:
        """Append finished rows to the durable record, then rewrite trials.csv."""
        with open(self.trials_jsonl, "a") as fh:
            for row in rows:
                fh.write(json.dumps(_jsonable(row)) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.write_csv()

    @property
    def steps_csv(self) -> Path:
        return self.path / "steps.csv"

    def write_csv(self) -> None:
        rows = self.rows()
        columns = list(ID_COLUMNS) + list(FAULT_FIGURES)
        phases = sorted({k for r in rows for k in r if is_phase(k)})
        columns += phases + list(TAIL_COLUMNS)
        extra = sorted({k for r in rows for k in r} - set(columns))
        tmp = self.path / "trials.csv.tmp"
        with open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns + extra)
            writer.writeheader()
            for r in rows:
                writer.writerow({k: _cell(r.get(k)) for k in columns + extra})
        tmp.rename(self.path / "trials.csv")

    def read_run_json(self) -> dict[str, Any]:
        path = self.path / "run.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def write_run_json(self, info: dict[str, Any]) -> None:
        tmp = self.path / "run.json.tmp"
        tmp.write_text(json.dumps(_jsonable(info), indent=2, sort_keys=False) + "\n")
        tmp.rename(self.path / "run.json")


def step_rows(point: Point, trial: int, reference: bool, events: Iterable[Event]) -> list[dict[str, Any]]:
    events = list(events)
    start = next((e["t"] for e in events if e["event"] == "trial_start"), events[0]["t"] if events else 0)
    losses = {key: ws.loss for key, ws in world_steps(events).items() if ws.has_loss}
    rows = []
    for e in events:
        if e["event"] != "step_end":
            continue
        key = (int(e.get("gen", 0)), int(e["step"]))
        rows.append(
            {
                "point_hash": point.point_hash,
                "label": point.label,
                "trial": trial,
                "reference": reference,
                "rank": e["rank"],
                "pid": e.get("pid"),
                "gen": key[0],
                "step": key[1],
                "t_s": (e["t"] - start) / 1e9,
                "step_s": e.get("step_s"),
                "world_size": e.get("world_size"),
                "group_rank": e.get("group_rank"),
                "loss": losses.get(key),
                "loss_share": e.get("loss_share"),
                "algbw_gbps": e.get("algbw_gbps"),
                "busbw_gbps": e.get("busbw_gbps"),
            }
        )
    return rows


def _cell(value: Any) -> Any:
    """NaN and None are written as empty cells: a figure that does not exist is empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
