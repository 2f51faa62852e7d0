"""Make a large results directory out of a real finished run, to benchmark ``ftbench report``.

    .venv/bin/python tools/bigrun.py SOURCE_RUN OUT_DIR --trials 1000 [--points 8] [--events link|copy|none]

A report of thousands of trials has to be measured on thousands of trials, and running
them takes hours. This tool replicates the trials of a run ``ftbench run`` made (every
file in its public format: run.json, trials.jsonl, trials.csv, steps.csv, events/) into
``--points`` points of ``--trials // --points`` trials each: point ``k`` is a copy of the
source's point ``k mod n`` (label suffixed ``replica=k``, a point hash of its own), and
its trial ``t`` is the source point's trial ``t mod m``, its rows, its steps.csv rows and
its event log, with the point hash, label and trial rewritten. A point's fault-free
reference trial, if the source has one, is copied once per point. Nothing is invented:
every figure, step and event is one the harness measured, so a report of the copy has
the content of a real run of that size (its distributions are the source's, repeated).

Event logs are hard links by default (``--events link``: 10,000 trials of kill-one-rank
take ~0.8 GB of steps.csv but no more room for events), ``copy`` writes them out (cold
files, as a real run leaves them), ``none`` leaves them out (steps.csv stays).

The new run.json says how it was made (``command`` and ``replicated_from``), so its
report's environment table names the tool, not ``ftbench run``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results.writer import RunDir, read_rows  # noqa: E402

STEP_KEY_FIELDS = 4
"""steps.csv's leading columns: point_hash, label, trial, reference (what a copy rewrites)."""


def replica_hash(point_hash: str, k: int) -> str:
    """A point hash of its own for copy ``k`` (stable, so a rebuilt copy has the same names)."""
    return hashlib.sha256(f"{point_hash}|replica={k}".encode()).hexdigest()


def _csv_field(text: str) -> str:
    return f'"{text.replace(chr(34), chr(34) * 2)}"' if any(c in text for c in ',"\n') else text


def _steps_by_trial(path: Path) -> tuple[str, dict[tuple[str, int, bool], list[str]]]:
    """steps.csv's header and, per (point_hash, trial, reference), the text of its rows
    after the leading key columns. A label may hold commas (quoted), so the row is cut
    after the point hash and from the end of the quoted label, not by splitting."""
    import csv

    header = ""
    rows: dict[tuple[str, int, bool], list[str]] = defaultdict(list)
    if not path.exists():
        return header, rows
    with open(path, newline="") as fh:
        header = fh.readline()
        for line in fh:
            fields = next(csv.reader([line]))
            key = (fields[0], int(fields[2]), fields[3].strip().lower() in ("true", "1"))
            rows[key].append(",".join(_csv_field(f) for f in fields[STEP_KEY_FIELDS:]))
    return header, rows


def _place_events(src: Path, dest: Path, how: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if not f.is_file():
            continue
        if how == "link":
            try:
                os.link(f, dest / f.name)
                continue
            except OSError:
                pass  # another file system: copy instead
        shutil.copy2(f, dest / f.name)


def replicate(source: Path, out: Path, trials: int, points: int, events: str = "link") -> Path:
    """Write the copy into ``out`` (which must not exist); returns ``out``."""
    info = json.loads((source / "run.json").read_text())
    rows, notes = read_rows(source / "trials.jsonl")
    if notes:
        raise SystemExit(f"{source}: trials.jsonl has torn lines ({notes[0]}); use a finished run")
    src_points = [p for p in info.get("points", []) if any(r["point_hash"] == p["point_hash"] for r in rows)]
    if not src_points:
        raise SystemExit(f"{source}: no point of run.json has trials in trials.jsonl")
    if trials < points:
        raise SystemExit(f"--trials {trials} is fewer than --points {points}")
    per_point = trials // points
    if out.exists():
        raise SystemExit(f"{out} exists: choose a new directory")
    out.mkdir(parents=True)
    by_trial: dict[tuple[str, int, bool], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_trial[(r["point_hash"], int(r["trial"]), bool(r.get("reference")))].append(r)
    header, steps = _steps_by_trial(source / "steps.csv")
    new_points, host_clocks = [], {}
    with open(out / "trials.jsonl", "w") as tj, open(out / "steps.csv", "w", newline="") as sc:
        sc.write(header)
        for k in range(points):
            src = src_points[k % len(src_points)]
            h, label = replica_hash(src["point_hash"], k), f"{src['label']} replica={k}"
            new_points.append(
                {**src, "point_hash": h, "label": label, "values": {**src.get("values", {}), "replica": k}}
            )
            if src["point_hash"] in (info.get("host_clocks") or {}):
                host_clocks[h] = info["host_clocks"][src["point_hash"]]
            fault_trials = sorted({t for (ph, t, ref) in by_trial if ph == src["point_hash"] and not ref})
            wanted = [(t, fault_trials[t % len(fault_trials)], False) for t in range(per_point)]
            # a reference trial may have steps and events but no row (an older writer's)
            refs = {t for (ph, t, ref) in [*by_trial, *steps] if ph == src["point_hash"] and ref}
            wanted += [(t, t, True) for t in sorted(refs)]
            for t, src_t, ref in wanted:
                for r in by_trial[(src["point_hash"], src_t, ref)]:
                    tj.write(json.dumps({**r, "point_hash": h, "label": label, "trial": t}) + "\n")
                prefix = f"{h},{_csv_field(label)},{t},{ref},"
                sc.writelines(prefix + rest + "\n" for rest in steps.get((src["point_hash"], src_t, ref), []))
                src_dir = source / "events" / src["point_hash"][:12] / ("reference" if ref else str(src_t))
                if events != "none" and src_dir.is_dir():
                    _place_events(src_dir, out / "events" / h[:12] / ("reference" if ref else str(t)), events)
    info.update(
        points=new_points,
        trials=per_point,
        command=[
            "tools/bigrun.py",
            str(source),
            str(out),
            f"--trials={trials}",
            f"--points={points}",
            f"--events={events}",
        ],
        replicated_from=str(source),
    )
    if host_clocks:
        info["host_clocks"] = host_clocks
    else:
        info.pop("host_clocks", None)
    (out / "run.json").write_text(json.dumps(info, indent=2) + "\n")
    if not steps:
        (out / "steps.csv").unlink()
    RunDir(out).write_csv()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="a finished run directory (holding run.json)")
    ap.add_argument("out", type=Path, help="the new run directory (must not exist)")
    ap.add_argument("--trials", type=int, default=1000, help="fault trials in all (default 1000)")
    ap.add_argument("--points", type=int, default=8, help="points to spread them over (default 8)")
    ap.add_argument("--events", choices=("link", "copy", "none"), default="link", help="event logs (default link)")
    args = ap.parse_args(argv)
    if not (args.source / "run.json").exists():
        ap.error(f"{args.source}: no run.json (give a run directory, not a scenario's)")
    if args.trials < 1 or args.points < 1:
        ap.error("--trials and --points must be at least 1")
    path = replicate(args.source, args.out, args.trials, args.points, args.events)
    print(f"{path}: {args.points} points x {args.trials // args.points} trials from {args.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
