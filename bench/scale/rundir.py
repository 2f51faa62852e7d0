"""A scale run's directory: ``results/scale/<UTC time>_<commit>/``.

- ``scale.json``: when, which commit, versions, machine, clock, the spec, the machine's
  load before and after, the limits of the machine, the resolver, every stop (the
  coordinator, size, operation and limit), coordinators skipped and why;
- ``points.csv``: one row per operation per point per repetition (the columns of
  :class:`bench.scale.driver.Record`), appended as each point ends, so that an
  interrupted sweep keeps what it measured;
- ``logs/``: the coordinators' and participant processes' own output;
- ``scale.md``, ``scale.png``: the tables and plots (:mod:`bench.scale.page`).

A figure that does not exist (the last participant of a point that did not finish) is
an empty cell, never 0. ``ftbench project`` finds the newest run of ``results/scale``
that measured every coordinator (:func:`widest`) beside a failure run's scenario
directory, as it finds the tax and state runs.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd

from bench.scale.records import Record, Stop
from bench.scale.spec import ScaleSpec, from_dict
from bench.scenario.config import ConfigError

SCENARIO = "scale"
INFO = "scale.json"
POINTS = "points.csv"
COLUMNS = [f.name for f in fields(Record)]


def write_info(path: Path, info: dict[str, Any]) -> None:
    """``scale.json``, replaced whole (written, then renamed)."""
    tmp = path / f".{INFO}.tmp"
    tmp.write_text(json.dumps(info, indent=2, default=str) + "\n")
    os.replace(tmp, path / INFO)


def append(path: Path, record: Record) -> None:
    """One row of ``points.csv`` (the header first)."""
    file = path / POINTS
    new = not file.exists()
    with file.open("a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(COLUMNS)
        row = asdict(record)
        w.writerow(["" if isinstance(v, float) and math.isnan(v) else v for v in (row[c] for c in COLUMNS)])


@dataclass
class ScaleRun:
    path: Path
    info: dict[str, Any]
    records: pd.DataFrame

    @property
    def spec(self) -> ScaleSpec:
        return from_dict(self.info.get("spec", {}), str(self.path / INFO))

    @property
    def stops(self) -> list[Stop]:
        known = {f.name for f in fields(Stop)}
        return [Stop(**{k: v for k, v in s.items() if k in known}) for s in self.info.get("stops", [])]

    @property
    def tag(self) -> str:
        return self.path.name

    def ok(self) -> pd.DataFrame:
        """Rows of operations every participant finished."""
        df = self.records
        return df[(df["done"] == df["expected"]) & (df["error"].fillna("") == "")]


def resolve(path: str | Path) -> Path:
    """A scale run directory, or the newest finished run in a directory of them (the
    newest of any when none finished: an interrupted sweep holds fewer sizes)."""
    p = Path(path)
    if (p / INFO).exists():
        return p
    if p.is_dir():
        runs = sorted((d for d in p.iterdir() if (d / INFO).exists()), key=_created)
        finished = [d for d in runs if _finished(d)]
        if finished or runs:
            return (finished or runs)[-1]
    raise ConfigError(str(path), "", f"a scale run directory holding {INFO} (or a directory of them)")


def widest(base: Path) -> Path:
    """The newest finished run that measured every coordinator any finished run there
    measured, else the newest finished: a later sweep of one coordinator (``--set
    coordinators=[...]``) does not take the others' curves from the projection."""
    if not base.is_dir():
        return base
    runs = sorted((d for d in base.iterdir() if (d / INFO).exists() and _finished(d)), key=_created)
    measured = {d: _coordinators(d) for d in runs}
    every = set().union(*measured.values()) if measured else set()
    covering = [d for d in runs if measured[d] >= every]
    return (covering or runs or [base])[-1]


def _coordinators(d: Path) -> set[str]:
    try:
        return set(json.loads((d / INFO).read_text()).get("spec", {}).get("coordinators", []))
    except (OSError, json.JSONDecodeError, AttributeError, TypeError):
        return set()


def _created(d: Path) -> tuple[str, str]:
    try:
        created = str(json.loads((d / INFO).read_text()).get("created", ""))
    except (OSError, json.JSONDecodeError):
        created = ""
    return created, d.name


def _finished(d: Path) -> bool:
    try:
        return bool(json.loads((d / INFO).read_text()).get("finished"))
    except (OSError, json.JSONDecodeError, AttributeError):
        return False


def load(path: str | Path) -> ScaleRun:
    p = resolve(path)
    try:
        info = json.loads((p / INFO).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(str(p / INFO), "", "a readable scale.json", str(err)) from None
    if not isinstance(info, dict):
        raise ConfigError(str(p / INFO), "", "a JSON object", type(info).__name__)
    file = p / POINTS
    if file.exists() and file.stat().st_size:
        df = pd.read_csv(file, keep_default_na=True)
        df["error"] = df["error"].fillna("").astype(str)
    else:
        df = pd.DataFrame(columns=COLUMNS)
    missing = [c for c in ("coordinator", "op", "n", "p50_s", "p95_s", "all_s") if c not in df.columns]
    if missing:
        raise ConfigError(str(file), missing[0], "a column of points.csv")
    for column in COLUMNS:  # a run of an older ftbench lacks the readings added since: empty, not 0
        if column not in df.columns:
            df[column] = math.nan
    return ScaleRun(path=p, info=info, records=df)


def locate(option: str | None, beside: Path) -> ScaleRun | None:
    """``none``: no scale run; ``auto``/unset: the newest under ``beside``'s
    ``results/scale`` (``beside`` a failure run: ``results/<scenario>/<run>``), if any; else
    a path."""
    if option == "none":
        return None
    if option in (None, "auto"):
        try:
            return load(widest(beside.parent.parent / SCENARIO))
        except ConfigError:
            return None
    try:
        return load(option)
    except ConfigError:
        raise ConfigError("--scale", "", "a scale run directory holding scale.json, auto or none", option) from None
