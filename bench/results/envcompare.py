"""One run, several environments: a version is just another axis of a point.

A run made with ``--env A --env B`` (a sweep of ``launch.env``) holds each point once
per environment. To compare or gate one environment against another, the run is split
into views, one per environment, whose points are labelled without the environment, so
that :func:`bench.results.compare.pair_points` pairs each point with its twin.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bench.results.compare import GateOptions, Row, compare_runs, run_differences
from bench.results.reader import Run
from bench.scenario.config import ConfigError
from bench.scenario.overrides import label
from bench.scenario.requirements import parse

ENV_KEY = "launch.env"


def normal(spec: str, *, origin: str = "--env-baseline") -> str:
    """A spec as rows record it (requirements sorted, single spaces)."""
    try:
        return " ".join(parse(spec))
    except ValueError as err:
        raise ConfigError(origin, "", "requirements NAME[==VERSION] separated by spaces", str(err)) from None


def point_env(point: dict[str, Any]) -> str:
    """The environment a point of run.json ran in ("" for the harness's own)."""
    values = point.get("values") or {}
    spec = values.get(ENV_KEY, (point.get("config") or {}).get("launch", {}).get("env", ""))
    return " ".join(sorted(str(spec).split()))


def environments(run: Run) -> list[str]:
    """The run's environments, in the order its points list them."""
    seen: list[str] = []
    for p in run.points():
        if (env := point_env(p)) not in seen:
            seen.append(env)
    return seen


def view(run: Run, env: str) -> Run:
    """The points of ``run`` that ran in ``env``, labelled without the environment."""
    pts = [p for p in run.info.get("points", []) if point_env(p) == env]
    relabel = {p["point_hash"]: _label(run, p) for p in pts}
    info = dict(run.info, points=[dict(p, label=relabel[p["point_hash"]]) for p in pts])
    trials = run.trials
    if not trials.empty:
        trials = trials[trials["point_hash"].isin(relabel)].copy()
        trials["label"] = trials["point_hash"].map(relabel)
    versions = (run.info.get("environments") or {}).get(env)
    if versions:
        info["versions"] = dict(info.get("versions") or {}, stack=versions)
    return replace(run, info=info, trials=trials, _steps=None)


def split(run: Run, base_env: str) -> tuple[Run, list[tuple[str, Run]]]:
    """The view of ``base_env`` and, per other environment, its view."""
    base_env = normal(base_env)
    envs = environments(run)
    if base_env not in envs:
        shown = ", ".join(repr(e) if e else "'' (the harness's own)" for e in envs)
        raise ConfigError("--env-baseline", "", f"an environment of {run.path} ({shown})", base_env)
    others = [(e, view(run, e)) for e in envs if e != base_env]
    if not others:
        raise ConfigError("--env-baseline", "", f"a run with another environment beside {base_env!r}", str(run.path))
    return view(run, base_env), others


def compare_envs(run: Run, base_env: str, opts: GateOptions) -> tuple[list[Row], list[str]]:
    """Every other environment of ``run`` against ``base_env``, point by point: the rows
    (labelled ``point [env]``) and what differs between the environments' versions."""
    base, others = split(run, base_env)
    rows: list[Row] = []
    messages: list[str] = []
    for env, cand in others:
        tag = f"[{env or 'harness env'} vs {normal(base_env) or 'harness env'}]"
        rows += [replace(r, label=f"{r.label} {tag}") for r in compare_runs(base, cand, opts)]
        messages += [f"{tag} {line}" for line in run_differences(base, cand)]
    return rows, messages


def _label(run: Run, point: dict[str, Any]) -> str:
    values = [(k, v) for k, v in (point.get("values") or {}).items() if k != ENV_KEY]
    return label(run.name, values)
