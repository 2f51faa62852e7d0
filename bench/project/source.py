"""What a projection reads from a run directory: per point, each recovered trial's phases
and the facts that decide how its loss scales.

Only public columns of ``trials.csv``/``trials.jsonl`` are read (through
:mod:`bench.results.reader`), and what kind of stack a point is comes from its data, not
from its strategy's name, so a new strategy projects without code here:

- it *checkpoints* when its trials wrote checkpoints (``checkpoint_s`` > 0): its replayed
  work at scale is then half the checkpoint interval, not the measured catch-up;
- it *runs degraded* when the world it recovered into was smaller than before: the run
  measured a later return to full strength (``ttfs_s`` after ``downtime_s``), or none
  (``ttfs_s`` empty), in which case the cluster's ``full_strength_s`` is assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bench.results.reader import Run
from bench.scenario.figures import outcomes_text, phase_column, phase_name

CATCHUP = phase_column("catchup")
#: A return to full strength later than the downtime by less than this is the recovery
#: itself (a restarted world is full at its first good step), not degraded running.
SAME_S = 1e-3


@dataclass
class PointFigures:
    """One (strategy, fault) point of a run, reduced to what the projection needs."""

    label: str
    strategy: str
    fault: str
    world: int
    phases: list[str]
    """Phase names in the order they happen."""
    values: np.ndarray
    """Recovered trials x phases, seconds (a phase a trial lacks is 0: phases add up to
    the downtime, so a missing one took no time)."""
    degraded_s: np.ndarray
    """Per recovered trial: seconds run on a smaller world after recovery (NaN: never
    back to full strength in the run)."""
    checkpoints: bool
    outcomes: dict[str, int] = field(default_factory=dict)
    reason: str = ""
    """Why there is no projection (no trial recovered); empty when there is one."""

    @property
    def shrinks(self) -> bool:
        return bool(np.any(np.isnan(self.degraded_s)) or np.any(self.degraded_s > SAME_S))


def _num(v: object) -> float:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return f


def points(run: Run) -> list[PointFigures]:
    """Every point of the run with fault trials, in scenario order."""
    out = []
    for p, df in run.measured_points():
        h = p["point_hash"]
        first = df.iloc[0]
        cols = run.phase_columns(h)
        ok = df[df["outcome"] == "recovered"]
        outcomes = run.outcomes(h)
        reason = "" if not ok.empty else f"no trial recovered ({outcomes_text(outcomes)})"
        values = np.nan_to_num(ok[cols].to_numpy(dtype=float), nan=0.0) if cols else np.zeros((len(ok), 0))
        degraded = []
        for _, r in ok.iterrows():
            ttfs, down = _num(r.get("ttfs_s")), _num(r.get("downtime_s"))
            degraded.append(math.nan if math.isnan(ttfs) else max(0.0, ttfs - (0.0 if math.isnan(down) else down)))
        ckpt = "checkpoint_s" in df and bool((df["checkpoint_s"].astype(float).fillna(0.0) > 0).any())
        out.append(
            PointFigures(
                label=str(first["label"]),
                strategy=str(first.get("strategy", "")),
                fault=str(first.get("fault", "")),
                world=int(_num(first.get("world_size")) if not math.isnan(_num(first.get("world_size"))) else 0),
                phases=[phase_name(c) for c in cols],
                values=values,
                degraded_s=np.asarray(degraded, dtype=float),
                checkpoints=ckpt,
                outcomes=outcomes,
                reason=reason,
            )
        )
    return out


def scaling_data(run: Run, per_core: bool = False) -> dict[tuple[str, str, str], tuple[list[float], list[float]]]:
    """(strategy, fault, phase) -> (world sizes, seconds) over every recovered trial of
    a scaling run (a sweep of ``workload.world_size``); ``per_core``: each value divided
    by max(1, ranks / the machine's cores), as if every rank had a core of its own."""
    n_cores = cores(run)
    out: dict[tuple[str, str, str], tuple[list[float], list[float]]] = {}
    for p, df in run.measured_points():
        h = p["point_hash"]
        ok = df[df["outcome"] == "recovered"]
        for col in run.phase_columns(h):
            for _, r in ok.iterrows():
                y, w = _num(r.get(col)), _num(r.get("world_size"))
                if math.isnan(w):
                    continue
                key = (str(r.get("strategy", "")), str(r.get("fault", "")), phase_name(col))
                ws, ys = out.setdefault(key, ([], []))
                ws.append(w)
                share = max(1.0, w / n_cores) if per_core and n_cores else 1.0
                ys.append(0.0 if math.isnan(y) else y / share)
    return out


def cores(run: Run) -> int:
    """CPUs of the machine that measured the run (0: not recorded)."""
    v = _num(run.info.get("machine", {}).get("cpus"))
    return 0 if math.isnan(v) else int(v)
