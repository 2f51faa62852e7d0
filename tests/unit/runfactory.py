"""Hand-made results directories in the public format (run.json, trials.jsonl,
trials.csv, steps.csv, events/) for the tests of compare, gate, report and export.

They are written from the documented column names, not through the harness' writer,
so the readers are tested against the interface users' scripts rely on.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from pathlib import Path
from typing import Any

from bench.results.writer import STEP_COLUMNS

FIGS = ("ttd_s", "ttd_all_s", "ttr_s", "downtime_s", "steps_lost", "goodput", "degraded_step_ratio", "loss_delta")
PHASES = ("phase_detect_s", "phase_isolate_s", "phase_reconfigure_s", "phase_restore_s", "phase_catchup_s")


def trial(ttd: float | None, ttr: float | None = None, outcome: str | None = None, **extra: Any) -> dict[str, Any]:
    """One fault trial: detection after ``ttd`` s, recovery ``ttr`` s later (None: none)."""
    if outcome is None:
        outcome = "recovered" if ttr is not None else ("failed" if ttd is not None else "absorbed")
    row: dict[str, Any] = dict.fromkeys(FIGS + PHASES)
    row.update(ttd_s=ttd, ttd_all_s=None if ttd is None else ttd * 1.1, outcome=outcome, goodput=0.8)
    if ttd is not None:
        row["phase_detect_s"] = ttd
    if ttd is not None and ttr is not None:
        row.update(
            ttr_s=ttr,
            downtime_s=ttd + ttr,
            steps_lost=0.0,
            degraded_step_ratio=1.2,
            phase_isolate_s=ttr * 0.5,
            phase_reconfigure_s=ttr * 0.2,
            phase_catchup_s=ttr * 0.3,
        )
    row.update(extra)
    return row


def point_hash(label: str, salt: str = "") -> str:
    return hashlib.sha256(f"{label}|{salt}".encode()).hexdigest()


def write_run(
    root: Path,
    name: str,
    points: dict[str, list[dict[str, Any]]],
    *,
    salt: str = "",
    strategy: str = "reinit",
    gate: dict[str, Any] | None = None,
    versions: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    steps: bool = False,
    reference: bool = False,
    values: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """A run of scenario ``name`` with the given trials per point label.

    ``salt`` changes every point hash (the same scenario with another knob); ``config``
    is each point's configuration in run.json; ``steps`` also writes steps.csv and
    event logs (4 ranks, rank 2 fails at step 10, 0.09 s after the first step ended,
    the 3 survivors go on in generation 1);
    ``values``: each label's swept values.
    """
    path = root / name / f"20261202T120000Z_{salt or 'base'}"
    path.mkdir(parents=True)
    rows, pts = [], []
    for label, trials in points.items():
        h = point_hash(label, salt)
        strat = label.split("=", 1)[1] if label.startswith("strategy=") else strategy
        pts.append(
            {
                "point_hash": h,
                "label": label,
                "values": (values or {}).get(label, {}),
                "config": {"workload": {"world_size": 4}, "recovery": {"strategy": strat}, **(config or {})},
            }
        )
        for i, t in enumerate(trials):
            rows.append(
                {
                    "point_hash": h,
                    "label": label,
                    "strategy": strat,
                    "workload": "ddp",
                    "backend": "gloo",
                    "world_size": 4,
                    "trial": i,
                    "seed": 0,
                    "reference": False,
                    "fault_index": 0,
                    "fault": "kill",
                    "target": "2",
                    "error": "",
                    "ff_step_s": 0.01,
                    "steps_done": 20,
                    "trial_wall_s": 1.0,
                    **t,
                }
            )
            if steps:
                _write_trial_logs(path, h, label, i, t)
        if steps and reference:
            _write_trial_logs(path, h, label, 0, trial(None), is_reference=True)
    with open(path / "trials.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    columns = list(rows[0]) if rows else []
    with open(path / "trials.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if v is None or (isinstance(v, float) and math.isnan(v)) else v for k, v in r.items()})
    info = {
        "suite": "ftbench",
        "version": "0.1.0",
        "commit": f"abc{salt}",
        "created": "2026-12-02T12:00:00Z",
        "command": ["ftbench", "run", name],
        "status": "complete",
        "trials": max(map(len, points.values())),
        "clock": {"implementation": "clock_gettime(CLOCK_MONOTONIC)", "resolution_s": 1e-9},
        "knobs": {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
        "versions": versions or {"torch": "2.13.0", "python": "3.11.7"},
        "machine": {"hostname": "ci", "cpus": 2, "machine": "x86_64", "platform": "Linux-6-x86_64"},
        "scenario": {
            "name": name,
            "description": "",
            "source": f"{name}.toml",
            "raw": {"name": name, **({"gate": gate} if gate else {})},
            "sweep": {},
        },
        "points": pts,
    }
    (path / "run.json").write_text(json.dumps(info, indent=2))
    return path


def _write_trial_logs(path: Path, h: str, label: str, i: int, t: dict[str, Any], is_reference: bool = False) -> None:
    """steps.csv rows and an event log consistent with the trial's figures."""
    events: list[dict[str, Any]] = [{"t": 0, "event": "trial_start", "src": "harness"}]
    step_rows = []
    ns = 1_000_000_000
    t_inject = 0.5
    for step in range(1, 11):
        for rank in range(4):
            events.append(
                {
                    "t": int((0.4 + step * 0.01) * ns),
                    "event": "step_end",
                    "src": "rank",
                    "rank": rank,
                    "step": step,
                    "gen": 0,
                    "step_s": 0.01,
                }
            )
            step_rows.append((rank, 0, step, 0.4 + step * 0.01, 1.0 / step, 4))
    resume = t_inject
    if not is_reference and t.get("ttd_s") is not None:
        events.append(
            {
                "t": int(t_inject * ns),
                "event": "inject",
                "src": "harness",
                "fault": 0,
                "kind": "kill",
                "ranks": [2],
                "step": 10,
            }
        )
        t_detect = t_inject + t["ttd_s"]
        events.append({"t": int(t_detect * ns), "event": "detect", "src": "rank", "rank": 0})
        resume = t_detect + (t.get("ttr_s") or 0.0)
    if is_reference or t.get("ttr_s") is not None:
        ranks = range(4) if is_reference else (0, 1, 3)
        for step in range(11, 21):
            for rank in ranks:
                t_s = resume + (step - 11) * 0.01
                loss = 1.0 / step + (0 if is_reference else 1e-3)
                step_rows.append((rank, 0 if is_reference else 1, step, t_s, loss, len(ranks)))
                events.append(
                    {
                        "t": int(t_s * ns),
                        "event": "step_end",
                        "src": "rank",
                        "rank": rank,
                        "step": step,
                        "gen": 0 if is_reference else 1,
                        "step_s": 0.01,
                    }
                )
    trial_dir = path / "events" / h[:12] / ("reference" if is_reference else str(i))
    trial_dir.mkdir(parents=True, exist_ok=True)
    with open(trial_dir / "harness.jsonl", "w") as fh:
        for e in events:
            fh.write(json.dumps(e) + "\n")
    new = not (path / "steps.csv").exists()
    with open(path / "steps.csv", "a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(STEP_COLUMNS)
        for rank, gen, step, t_s, loss, world in step_rows:
            w.writerow(
                [
                    h,
                    label,
                    0 if is_reference else i,
                    is_reference,
                    rank,
                    1000 + rank,
                    gen,
                    step,
                    t_s,
                    0.01,
                    world,
                    rank,
                    loss,
                    loss / 4,
                    "",
                    "",
                ]
            )
