"""Results in the formats other benchmark tools read.

- ``pytest-benchmark``: the JSON of ``pytest --benchmark-json`` / ``--benchmark-autosave``,
  so ``pytest-benchmark compare`` lists and compares ftbench figures beside a project's
  own micro-benchmarks. pytest-benchmark treats every value as seconds, so only the
  figures measured in seconds (``*_s``) go there; each (point, figure) is one
  benchmark whose "rounds" are the trials that have the figure.
- ``github-smaller`` / ``github-bigger``: github-action-benchmark's
  ``customSmallerIsBetter`` and ``customBiggerIsBetter`` tools (one entry per point and
  figure, the value a median). ``loss_delta`` is in neither: its sign is not a
  direction of better or worse.
- ``bencher``: Bencher Metric Format, a benchmark per point with a measure per figure,
  ``lower_value``/``upper_value`` the 95 % confidence interval of the median where
  the number of trials allows one.

Every value is a median (or, for pytest-benchmark, the raw trials): one slow trial
must not move a tracked figure. Figures with no value are left out, never written as 0.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.results.reader import Run
from bench.results.stats import describe
from bench.scenario.figures import figure, outcomes_text

FORMATS = ("pytest-benchmark", "github-smaller", "github-bigger", "bencher")
#: The pytest-benchmark release whose JSON layout this writes (4.x and 5.x read it).
PYTEST_BENCHMARK_LAYOUT = "5.0.0"


def _points(run: Run) -> list[tuple[str, str]]:
    return [(p["point_hash"], p["label"]) for p in run.points()]


def _name(run: Run, label: str) -> str:
    return label if label == run.name else f"{run.name}/{label}"


def _quartiles(data: Sequence[float]) -> tuple[float, float]:
    """Quartiles the way pytest-benchmark computes them (Wikipedia's methods 2 and 3),
    so that its tables show the same IQR and outlier counts as for its own runs."""
    xs = sorted(data)
    n = len(xs)
    if n == 1:
        return xs[0], xs[0]
    if n % 2 == 0:
        return statistics.median(xs[: n // 2]), statistics.median(xs[n // 2 :])
    k, r = n // 4, n % 4
    if r == 1:
        return 0.25 * xs[k - 1] + 0.75 * xs[k], 0.75 * xs[3 * k] + 0.25 * xs[3 * k + 1]
    return 0.75 * xs[k] + 0.25 * xs[k + 1], 0.25 * xs[3 * k + 1] + 0.75 * xs[3 * k + 2]


def pytest_benchmark_stats(data: Sequence[float]) -> dict[str, Any]:
    """The ``stats`` object of one pytest-benchmark benchmark, from its rounds."""
    xs = list(data)
    mean = statistics.mean(xs)
    stddev = statistics.stdev(xs) if len(xs) > 1 else 0.0
    q1, q3 = _quartiles(xs)
    iqr = q3 - q1
    lo_fence, hi_fence = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    inside = sorted(x for x in xs if lo_fence <= x <= hi_fence)
    iqr_outliers = sum(1 for x in xs if x < lo_fence or x > hi_fence)
    stddev_outliers = sum(1 for x in xs if x < mean - stddev or x > mean + stddev)
    total = sum(xs)
    return {
        "min": min(xs),
        "max": max(xs),
        "mean": mean,
        "stddev": stddev,
        "rounds": len(xs),
        "median": statistics.median(xs),
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": iqr_outliers,
        "stddev_outliers": stddev_outliers,
        "outliers": f"{stddev_outliers};{iqr_outliers}",
        "ld15iqr": inside[0] if inside else min(xs),
        "hd15iqr": inside[-1] if inside else max(xs),
        "ops": len(xs) / total if total else 0,
        "total": total,
        "data": xs,
        "iterations": 1,
    }


#: pytest-benchmark's per-benchmark options, as its own JSON records them.
_OPTIONS = {
    "disable_gc": False,
    "timer": "CLOCK_MONOTONIC (ftbench event logs)",
    "min_rounds": 1,
    "max_time": None,
    "min_time": None,
    "precision": None,
    "confidence": None,
    "warmup": False,
}


def pytest_benchmark(run: Run) -> dict[str, Any]:
    """The run as one pytest-benchmark session (``--benchmark-json`` layout)."""
    info = run.info
    commit = str(info.get("commit") or "unversioned")
    benchmarks = []
    for point_hash, label in _points(run):
        for metric in run.figure_columns():
            vals = run.values(point_hash, metric) if figure(metric).unit == "s" else []
            if not vals:
                continue
            extra = {
                "unit": "s",
                "point_hash": point_hash,
                "outcomes": run.outcomes(point_hash),
                "trials": int(run.measured(point_hash)["trial"].nunique()),
                "run": str(run.path),
            }
            benchmarks.append(
                {
                    "group": metric,
                    "name": f"{metric}[{label}]",
                    "fullname": f"ftbench/{run.name}::{metric}[{label}]",
                    "params": {"point": label},
                    "param": label,
                    "extra_info": extra,
                    "options": _OPTIONS,
                    "stats": pytest_benchmark_stats(vals),
                }
            )
    return {
        "machine_info": _machine_info(info),
        "commit_info": {
            "id": commit.replace("+dirty", ""),
            "time": info.get("created"),
            "author_time": info.get("created"),
            "dirty": commit.endswith("+dirty"),
            "project": "ftbench",
            "branch": "(unknown)",
        },
        "benchmarks": benchmarks,
        "datetime": _iso(info.get("created")),
        "version": PYTEST_BENCHMARK_LAYOUT,
    }


def _machine_info(info: dict[str, Any]) -> dict[str, Any]:
    machine = info.get("machine") or {}
    versions = info.get("versions") or {}
    py = str(versions.get("python") or "")
    return {
        "node": machine.get("hostname"),
        "processor": "",
        "machine": machine.get("machine"),
        "python_compiler": "",
        "python_implementation": platform.python_implementation(),
        "python_implementation_version": py,
        "python_version": py,
        "python_build": [],
        "release": "",
        "system": str(machine.get("platform", "")).split("-")[0],
        "cpu": {"count": machine.get("cpus")},
        "ftbench": {"versions": versions, "knobs": info.get("knobs")},
    }


def _iso(created: Any) -> str:
    """run.json's ``2026-12-02T13:04:20Z`` as pytest-benchmark writes datetimes."""
    text = str(created or "1970-01-01T00:00:00Z")
    return text[:-1] + "+00:00" if text.endswith("Z") else text


def github_action_benchmark(run: Run, bigger: bool = False) -> list[dict[str, Any]]:
    """Entries for github-action-benchmark's ``customSmallerIsBetter`` (or, with
    ``bigger``, ``customBiggerIsBetter``) tool."""
    out = []
    for point_hash, label in _points(run):
        outcomes = outcomes_text(run.outcomes(point_hash))
        for metric in run.figure_columns():
            if figure(metric).better != ("higher" if bigger else "lower"):
                continue
            s = describe(run.values(point_hash, metric))
            if s.n == 0:
                continue
            entry: dict[str, Any] = {
                "name": f"{_name(run, label)} {metric}",
                "unit": figure(metric).unit,
                "value": s.median,
            }
            if s.ci.exists:
                entry["range"] = f"{s.ci.low:.6g} to {s.ci.high:.6g} ({s.ci.coverage:.0%} CI of the median)"
            entry["extra"] = f"median of n={s.n} trials; outcomes: {outcomes}; point {point_hash[:12]}"
            out.append(entry)
    return out


def bencher_bmf(run: Run) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format: ``{benchmark: {measure: {value, lower_value, upper_value}}}``."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for point_hash, label in _points(run):
        measures = {}
        for metric in run.figure_columns():
            s = describe(run.values(point_hash, metric))
            if s.n == 0:
                continue
            m: dict[str, float] = {"value": s.median}
            if s.ci.exists:
                m["lower_value"], m["upper_value"] = s.ci.low, s.ci.high
            measures[metric] = m
        if measures:
            out[_name(run, label)] = measures
    return out


def export(run: Run, fmt: str) -> Any:
    """The run in format ``fmt`` (one of :data:`FORMATS`) as JSON-able data."""
    if fmt == "pytest-benchmark":
        return pytest_benchmark(run)
    if fmt == "github-smaller":
        return github_action_benchmark(run)
    if fmt == "github-bigger":
        return github_action_benchmark(run, bigger=True)
    if fmt == "bencher":
        return bencher_bmf(run)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")


def write(run: Run, fmt: str, out: Path | None) -> str:
    """Write the export to ``out`` (or return it for stdout) as JSON."""
    text = json.dumps(export(run, fmt), indent=2, allow_nan=False, default=_finite) + "\n"
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return text


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"not JSON serialisable: {value!r}")
