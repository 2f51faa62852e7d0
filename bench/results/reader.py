"""Reading finished runs back: what ``report``, ``compare``, ``gate`` and ``export`` share.

A run directory is read through its public files only (``run.json``, ``trials.jsonl``
or ``trials.csv``, ``steps.csv``, ``events/``), so a baseline copied into
``results/baselines/`` or produced by an older ftbench reads the same way. Rows of
fault-free reference trials are kept in :attr:`Run.trials` but never in
:meth:`Run.measured`: statistics are over fault trials only.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pandas as pd

from bench.results.summary import frame
from bench.results.writer import holder, read_rows
from bench.scenario.config import ConfigError
from bench.scenario.figures import FAULT_FIGURES, is_phase, phase_column
from bench.scenario.loader import validate_gate
from bench.scenario.model import GateSpec

#: Where ``ftbench baseline`` keeps baselines (committed; see results/.gitignore rules).
BASELINES = Path("results") / "baselines"
#: The files a baseline keeps: enough to compare and gate, small enough to commit.
BASELINE_FILES = ("run.json", "trials.jsonl", "trials.csv")
#: What a baseline may be called: a folder name, never a path.
BASELINE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: steps.csv's columns that the report's plots draw (timelines, loss curves).
PLOT_STEP_COLUMNS = ("point_hash", "trial", "reference", "rank", "gen", "step", "t_s", "step_s", "world_size", "loss")
#: Phase order where a run's rows do not give one (trials.csv sorts its columns).
CANONICAL_PHASES = ("detect", "isolate", "reconfigure", "restore", "catchup")


@dataclass
class Run:
    """One results directory, loaded."""

    path: Path
    info: dict[str, Any]
    trials: pd.DataFrame
    phase_order: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """What was skipped while reading (a torn line of trials.jsonl), for the user."""
    """Per point_hash, the phase keys in the order its rows list them (trials.jsonl)."""
    _steps: pd.DataFrame | None = None
    _memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    """Per-point selections of :attr:`trials` and steps.csv, made once: a report asks for
    the same point's rows hundreds of times, and a filter over thousands of rows each
    time was most of a large report's tables (reset when ``trials`` is replaced)."""

    @property
    def name(self) -> str:
        return str(self.info.get("scenario", {}).get("name") or self.path.parent.name)

    @property
    def tag(self) -> str:
        """Short name of the run for tables: ``<scenario>/<time>_<commit>``."""
        return f"{self.path.parent.name}/{self.path.name}"

    def points(self) -> list[dict[str, Any]]:
        """run.json's points, in scenario order, plus any that only trials know of."""
        pts = [dict(p) for p in self.info.get("points", [])]
        known = {p["point_hash"] for p in pts}
        if not self.trials.empty:
            for h, group in self.trials.groupby("point_hash", sort=False):
                if h not in known:
                    pts.append({"point_hash": str(h), "label": str(group["label"].iloc[0]), "values": {}, "config": {}})
        return pts

    def _memoised(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        if self._memo.get("trials") is not self.trials:
            self._memo.clear()
            self._memo["trials"] = self.trials
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def measured(self, point_hash: str | None = None) -> pd.DataFrame:
        """Fault-trial rows (reference trials excluded), optionally of one point."""
        if self.trials.empty:
            return self.trials

        def select() -> pd.DataFrame:
            df = self.trials[~self.trials["reference"]]
            return df if point_hash is None else df[df["point_hash"] == point_hash]

        # a shallow copy: with pandas' copy-on-write a caller that sets a column changes
        # its own frame, never the one kept here
        return cast(pd.DataFrame, self._memoised(("measured", point_hash), select)).copy(deep=False)

    def measured_points(self) -> Iterator[tuple[dict[str, Any], pd.DataFrame]]:
        """Each point that has fault trials, with its rows: (run.json's point, rows)."""
        for p in self.points():
            df = self.measured(p["point_hash"])
            if not df.empty:
                yield p, df

    def values(self, point_hash: str, metric: str) -> list[float]:
        """The figure's values that exist, one per fault trial of the point."""

        def present() -> list[float]:
            df = self.measured(point_hash)
            if df.empty or metric not in df:
                return []
            return [float(v) for v in df[metric] if not math.isnan(v)]

        return list(self._memoised(("values", point_hash, metric), present))

    def outcomes(self, point_hash: str) -> dict[str, int]:
        def count() -> dict[str, int]:
            df = self.measured(point_hash)
            if df.empty:
                return {}
            return {str(k): int(v) for k, v in df["outcome"].value_counts().items()}

        return dict(self._memoised(("outcomes", point_hash), count))

    def phase_columns(self, point_hash: str | None = None) -> list[str]:
        """``phase_*_s`` columns holding data, in the order the phases happen: a point's
        own order (its strategy's phases), or for the whole run every point's phases
        merged, each inserted after the phase that precedes it in its own point."""
        df = self.trials if point_hash is None else self.measured(point_hash)
        have = {c for c in df.columns if is_phase(c) and df[c].notna().any()}
        if point_hash is not None:
            return [c for c in self._order(point_hash) if c in have]
        merged: list[str] = []
        for h in [*self.phase_order, ""]:
            prev = None
            for c in self._order(h):
                if c not in merged:
                    merged.insert(merged.index(prev) + 1 if prev in merged else len(merged), c)
                prev = c
        ordered = [c for c in merged if c in have]
        rest = sorted(have - set(ordered))
        body = [c for c in ordered + rest if c != "phase_catchup_s"]
        return body + (["phase_catchup_s"] if "phase_catchup_s" in have else [])

    def _order(self, point_hash: str) -> list[str]:
        """One point's phase order: the key order of its rows in trials.jsonl, keeping
        only phases some trial of the point has (other keys are a writer's defaults);
        the canonical order where trials.csv (sorted columns) is all there is."""
        order = self.phase_order.get(point_hash)
        canonical = [phase_column(p) for p in CANONICAL_PHASES]
        if not order:
            return canonical
        rows = self.measured(point_hash) if point_hash else self.trials
        return [c for c in order if c in rows and rows[c].notna().any()]

    def gate_spec(self) -> GateSpec:
        """The scenario's ``[gate]`` table, read on its own (so an old run whose other
        keys no longer validate can still be gated)."""
        sc = self.info.get("scenario", {})
        return validate_gate(
            sc.get("raw", {}).get("gate", {}), file=str(self.path / "run.json"), prefix="scenario.raw.gate"
        )

    def figure_columns(self) -> list[str]:
        """Figure columns holding data: the fault figures, then the phases in order."""
        df = self.measured()
        if df.empty:
            return []
        cols = [c for c in FAULT_FIGURES if c in df] + self.phase_columns()
        return [c for c in cols if df[c].notna().any()]

    def point_config(self, point_hash: str) -> dict[str, Any]:
        return next((p.get("config", {}) for p in self.info.get("points", []) if p["point_hash"] == point_hash), {})

    def steps(self) -> pd.DataFrame:
        """steps.csv (empty frame if absent, e.g. in a baseline)."""
        if self._steps is None:
            path = self.path / "steps.csv"
            self._steps = pd.read_csv(path) if path.exists() and path.stat().st_size else pd.DataFrame()
            if not self._steps.empty:
                self._steps["reference"] = _bools(self._steps["reference"])
        return self._steps

    def point_steps(self, point_hash: str) -> pd.DataFrame:
        """steps.csv's rows of one point (fault and reference trials) in file order, with
        the columns the report draws (:data:`PLOT_STEP_COLUMNS`, those that exist);
        empty if the run has none (a baseline)."""
        found = self.steps_by_point().get(point_hash)
        return pd.DataFrame() if found is None else found.copy(deep=False)

    def steps_by_point(self) -> dict[str, pd.DataFrame]:
        """:meth:`point_steps` of every point. The file is read once, without the columns
        no plot needs, and split by point once: of a 10,000-trial run it is millions of
        rows, and a filter over all of them per plot cost more than the plots."""

        def split() -> dict[str, pd.DataFrame]:
            if self._steps is not None:
                table = self._steps[[c for c in PLOT_STEP_COLUMNS if c in self._steps]]
            else:
                path = self.path / "steps.csv"
                if not path.exists() or not path.stat().st_size:
                    return {}
                table = pd.read_csv(path, usecols=lambda c: c in PLOT_STEP_COLUMNS, dtype={"point_hash": "category"})
                if table.empty:
                    return {}
                table["reference"] = _bools(table["reference"])
            return {str(h): g for h, g in table.groupby("point_hash", sort=False, observed=True)}

        return cast(dict[str, pd.DataFrame], self._memoised(("steps_by_point",), split))

    def events_dir(self, point_hash: str, trial: int | str) -> Path:
        return self.path / "events" / point_hash[:12] / str(trial)


def resolve(path: str | Path) -> Path:
    """A run directory from what a user or CI job has at hand: the directory itself, a
    name under ``results/baselines/``, or a scenario's directory (then its newest run,
    since CI does not know the timestamped name ``ftbench run`` chose)."""
    p = Path(path)
    if not p.exists() and (BASELINES / str(path)).exists():
        p = BASELINES / str(path)
    if (p / "run.json").exists():
        return p
    if p.is_dir():
        runs = sorted((d for d in p.iterdir() if (d / "run.json").exists()), key=_created)
        if runs:
            return runs[-1]
    raise ConfigError(
        str(path),
        "",
        "a results directory holding run.json (or a directory of such runs, "
        "or a baseline name under results/baselines/)",
    )


def _created(d: Path) -> tuple[str, str]:
    try:
        created = str(json.loads((d / "run.json").read_text()).get("created", ""))
    except (OSError, json.JSONDecodeError):
        created = ""
    return created, d.name


def load(path: str | Path) -> Run:
    """Load a run directory (see :func:`resolve` for what ``path`` may be)."""
    p = resolve(path)
    try:
        info = json.loads((p / "run.json").read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(str(p / "run.json"), "", "valid JSON", str(err)) from None
    rows, order, notes = _rows(p)
    live = holder(p)
    if live is not None:
        notes.append(f"{p}: still being written (pid {live.get('pid')}): only the trials finished so far are read")
    trials = frame(rows)
    if not trials.empty:
        for col in ("point_hash", "label", "outcome"):
            if col not in trials:
                raise ConfigError(str(p / "trials.csv"), col, "a column of trials.csv (the run's rows)")
        trials["reference"] = _bools(trials["reference"]) if "reference" in trials else False
        trials["point_hash"] = trials["point_hash"].astype(str)
        trials["label"] = trials["label"].astype(str)
    return Run(path=p, info=info, trials=trials, phase_order=order, notes=notes)


def _rows(p: Path) -> tuple[list[dict[str, Any]], dict[str, list[str]], list[str]]:
    """Rows from trials.jsonl (the durable record; its keys keep the phases in the order
    they happen) or else trials.csv; each point's phase order; notes on lines skipped."""
    jsonl = p / "trials.jsonl"
    if jsonl.exists():
        rows, notes = read_rows(jsonl)
        order: dict[str, list[str]] = {}
        for r in rows:
            keys = order.setdefault(str(r.get("point_hash")), [])
            keys += [k for k in r if is_phase(k) and k not in keys]
        return rows, order, notes
    csv = p / "trials.csv"
    if csv.exists() and csv.stat().st_size:
        df = pd.read_csv(csv, keep_default_na=False, na_values=[""], dtype={"point_hash": str, "error": str})
        return [{str(k): v for k, v in r.items()} for r in df.to_dict("records")], {}, []
    return [], {}, []


def _bools(col: pd.Series) -> pd.Series:
    return col.map(lambda v: str(v).strip().lower() in ("true", "1", "yes")).astype(bool)


def save_baseline(run: Run, name: str | None = None, root: Path = BASELINES) -> Path:
    """Copy the run's small files into ``root/<name>`` (default: the scenario's name),
    replacing an older baseline of that name. Events and steps stay behind: a baseline
    is what compare and gate need, small enough to commit."""
    chosen = name or run.name
    if not BASELINE_NAME.fullmatch(chosen) or chosen in (".", ".."):
        raise ConfigError(
            "--name" if name else str(run.path / "run.json"),
            "" if name else "scenario.name",
            f"a plain name of letters, digits, '.', '_' and '-' (a baseline is a folder of {root})",
            chosen,
        )
    dest = root / chosen
    if dest.resolve().parent != root.resolve():
        raise ConfigError("--name", "", f"a name of a folder directly in {root}", chosen)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for f in BASELINE_FILES:
        if (run.path / f).exists():
            shutil.copy2(run.path / f, dest / f)
    return dest


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists are indexed like ``--set`` keys."""
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(d, list) and any(isinstance(v, (dict, list)) for v in d):
        for i, v in enumerate(d):
            out.update(flatten(v, f"{prefix}.{i}" if prefix else str(i)))
    else:
        out[prefix] = d
    return out


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Readable ``key: old -> new`` lines for what differs between two nested dicts."""
    fa, fb = flatten(a), flatten(b)
    return [f"{k}: {fa.get(k, '-')} -> {fb.get(k, '-')}" for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]
