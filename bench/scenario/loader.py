"""Scenario files: TOML in, frozen dataclasses and sweep points out.

A scenario is ``workload x fault(s) x recovery strategy x sweep x gate``. Sweeps and
``--set`` overrides are applied to the parsed TOML *before* validation, so an override
is checked exactly like a value written in the file and every error names the dotted
key it came from. A scenario that :func:`parse` returns is valid in every point of its
sweep, and no two of its points are the same measurement; the limits that keep reading
it bounded are :mod:`bench.scenario.limits`.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from bench.scenario import figures, limits
from bench.scenario.config import UNKNOWN_KEY, ConfigError, build, join, show, to_dict
from bench.scenario.crosscheck import cross_check
from bench.scenario.faults import FAULTS, FaultSpec
from bench.scenario.model import (
    GateSpec,
    LaunchSpec,
    MeasureSpec,
    Point,
    RecoverySpec,
    Scenario,
    WorkloadSpec,
)
from bench.scenario.overrides import apply_override, canonical, check_sweep, flatten_sweep, label, set_path
from bench.scenario.registry import Registry
from bench.scenario.requirements import torch_of, version_of
from bench.scenario.strategy import STRATEGIES
from bench.scenario.workload import WORKLOADS, own_strategy

TOP_KEYS = ("name", "description", "workload", "faults", "recovery", "measure", "launch", "sweep", "gate")


Tagged = TypeVar("Tagged", WorkloadSpec, FaultSpec)
"""Specs whose ``kind`` names a plug-in that brings its own knobs."""


def load(path: str | Path, overrides: Sequence[tuple[str, Any]] = ()) -> Scenario:
    """Read and validate a scenario file, applying ``--set`` style overrides."""
    path = Path(path)
    file = str(path)
    raw = limits.parse_toml(limits.read_text(path, file), file)
    raw.setdefault("name", limits.default_name(path.stem))
    return parse(raw, file=file, overrides=overrides)


def parse(source: Mapping[str, Any], *, file: str, overrides: Sequence[tuple[str, Any]] = ()) -> Scenario:
    """Validate parsed TOML (``source``), with ``--set`` overrides and its sweep: the
    file itself, then (within :data:`~bench.scenario.limits.MAX_POINTS`) every point."""
    if not isinstance(source, Mapping):
        raise ConfigError(file, "", "a table of scenario keys", source)
    limits.check_depth(source, file)
    raw = copy.deepcopy(dict(source))
    table = raw.pop("sweep", {})
    skip = False
    if isinstance(table, Mapping) and "refused" in table:
        skip = _refused_policy(table, file)
        table = {k: v for k, v in table.items() if k != "refused"}
    sweep = flatten_sweep(table, file)
    for key, value in overrides:
        limits.check_depth(value, file, f"--set {key}")
        apply_override(raw, sweep, key, value, file=file)
    check_sweep(sweep, file)
    scenario = _validate(raw, file)
    scenario = replace(scenario, sweep=tuple((k, tuple(v)) for k, v in sweep.items()), raw=raw, skip_refused=skip)
    refused: dict[str, str] = {}
    expanded = list(_expand(scenario, refused))
    _remember(scenario, expanded, refused)
    gaps = [(p.scenario.recovery.strategy, stack_gap(p.scenario)) for p in expanded]
    if not gaps:
        raise ConfigError(file, "sweep.refused", '"error": validation refuses every combination of the sweep', "skip")
    if all(why for _, why in gaps):
        name, why = gaps[0]
        raise ConfigError(file, "recovery.strategy", f"a strategy the stack of some point serves ({why})", name)
    return scenario


def stack_gap(s: Scenario) -> str | None:
    """Why the stack a point runs cannot serve its strategy, or None: its torch
    (``Strategy.torch``) or one of its packages (``Package.supported``) at a version
    ftbench cannot drive. Also None where the version is not known before the point's
    environment is built (the runner then asks the running environment itself)."""
    strategy = STRATEGIES[s.recovery.strategy]
    found = torch_of(s.launch.env)
    if found is not None and not strategy.serves_torch(found[0]):
        version, where = found
        return (
            f"{strategy.name} needs torch {strategy.torch}; this point runs torch {version} ({where}): "
            "try --env torch==2.15.0"
        )
    for package in strategy.packages:
        found = version_of(s.launch.env, package.dists)
        why = package.gap(found[0]) if found else None
        if why and found:
            return f"{strategy.name}: {why} ({found[1]})"
    return None


def _refused_policy(table: Mapping[str, Any], file: str) -> bool:
    """``sweep.refused``: ``"error"`` (the default: a refused combination refuses the
    scenario) or ``"skip"``."""
    value = table["refused"]
    if value not in ("error", "skip"):
        raise ConfigError(file, "sweep.refused", '"error" or "skip"', value)
    return bool(value == "skip")


_EXPANDED: list[tuple[Scenario, list[Point], dict[str, str]]] = []
"""The last few scenarios :func:`parse` returned, with the points it validated: the
commands that parse a scenario and then list its points (``validate``, ``show``, ``run``)
would otherwise validate every point twice. Kept by identity (a scenario holds dicts, so
it has no hash), a handful at most."""
_EXPANDED_KEEP = 4


def _remember(scenario: Scenario, pts: list[Point], refused: dict[str, str]) -> None:
    _EXPANDED.append((scenario, pts, refused))
    del _EXPANDED[:-_EXPANDED_KEEP]


def points(scenario: Scenario) -> list[Point]:
    """Expand the sweep (a cartesian product, in file order) into validated points."""
    return expand(scenario)[0]


def expand(scenario: Scenario) -> tuple[list[Point], dict[str, str]]:
    """The points, and label -> reason of each combination of the sweep left out
    (``sweep.refused``), from one pass over the sweep (none at all for a scenario
    :func:`parse` just returned: it validated them already)."""
    for known, pts, refused in _EXPANDED:
        if known is scenario:
            return list(pts), dict(refused)
    out: dict[str, str] = {}
    return list(_expand(scenario, out)), out


def _expand(scenario: Scenario, refused: dict[str, str]) -> Iterator[Point]:
    """Every point of the sweep, validated; two points that are the same measurement
    (a value that does not reach the point's identity) are an error naming the axis. A
    combination validation refuses is an error, or with ``skip_refused`` goes into
    ``refused`` (label -> the reason)."""
    keys = [k for k, _ in scenario.sweep]
    file = scenario.source
    seen: dict[str, tuple[Any, ...]] = {}
    for indices in itertools.product(*(range(len(v)) for _, v in scenario.sweep)):
        combo = tuple(values[i] for (_, values), i in zip(scenario.sweep, indices, strict=True))
        raw = dict(scenario.raw)
        for key, value, i in zip(keys, combo, indices, strict=True):
            set_path(raw, key, value, file=file, origin=f"sweep.{key}.{i}", fresh=True)
        try:
            valid = _validate(raw, file, scenario.gate)
        except ConfigError as err:  # the message says which combination of the sweep
            if scenario.skip_refused:
                refused[label(scenario.name, tuple(zip(keys, combo, strict=True)))] = f"refused: {err}"
                continue
            context = ", ".join(f"{k} = {show(v)}" for k, v in zip(keys, combo, strict=True))
            raise ConfigError(
                err.file,
                err.key,
                f'{err.expected} (with sweep {context}; sweep.refused = "skip" leaves it out)',
                err.got,
            ) from None
        resolved = replace(valid, sweep=scenario.sweep, raw=raw)
        digest = point_hash(resolved)
        if digest in seen:
            _same_point(file, keys, seen[digest], combo)
        seen[digest] = combo
        values = tuple(zip(keys, combo, strict=True))
        yield Point(scenario=resolved, values=values, label=label(scenario.name, values), point_hash=digest)


def _same_point(file: str, keys: list[str], first: tuple[Any, ...], second: tuple[Any, ...]) -> None:
    differ = [i for i, (a, b) in enumerate(zip(first, second, strict=True)) if canonical(a) != canonical(b)]
    i = differ[0]
    raise ConfigError(
        file,
        f"sweep.{keys[i]}",
        f"values that make different points ({show(first[i])} and {show(second[i])} give the same point: "
        "the value does not reach what is measured)",
        second[i],
    )


def identity(scenario: Scenario, *, drop_defaults: bool = True) -> dict[str, Any]:
    """What makes two points the same measurement: not the name, trial count or gate.

    Fields at their defaults are left out of the hash, so that it survives new fields;
    run.json keeps them all (``drop_defaults=False``) for readers."""
    return {
        "workload": to_dict(scenario.workload, drop_defaults=drop_defaults),
        "faults": to_dict(scenario.faults, drop_defaults=drop_defaults),
        "recovery": to_dict(scenario.recovery, drop_defaults=drop_defaults),
        "launch": to_dict(scenario.launch, drop_defaults=drop_defaults),
        "seed": scenario.measure.seed,
    }


def point_hash(scenario: Scenario) -> str:
    canonical = json.dumps(identity(scenario), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


# --- validation -------------------------------------------------------------------------


def _validate(raw: Mapping[str, Any], file: str, gate: GateSpec | None = None) -> Scenario:
    """One configuration, sweep applied; ``gate``: the scenario's, already validated (a
    sweep cannot change it, and its service levels need not be checked per point)."""
    for key in raw:
        if key not in TOP_KEYS:
            raise ConfigError(file, join("", key), f"one of {', '.join(TOP_KEYS)}", UNKNOWN_KEY)
    name = limits.check_name(raw.get("name", ""), file)
    description = limits.check_description(raw.get("description", ""), file)

    workload = _tagged(WorkloadSpec, raw.get("workload", {}), WORKLOADS, file, "workload", default_kind="ddp")
    faults_raw = raw.get("faults", [])
    if not isinstance(faults_raw, list):
        raise ConfigError(file, "faults", "an array of tables ([[faults]])", faults_raw)
    if len(faults_raw) > limits.MAX_FAULTS:
        raise ConfigError(file, "faults", f"at most {limits.MAX_FAULTS} [[faults]]", f"{len(faults_raw)} faults")
    faults = tuple(_tagged(FaultSpec, f, FAULTS, file, f"faults.{i}") for i, f in enumerate(faults_raw))
    recovery = _recovery(raw.get("recovery", {}), file, own_strategy(workload.kind) or default_strategy())
    measure = build(MeasureSpec, raw.get("measure", {}), file=file, prefix="measure")
    launch = build(LaunchSpec, raw.get("launch", {}), file=file, prefix="launch")
    gate = gate if gate is not None else validate_gate(raw.get("gate", {}), file=file)

    scenario = Scenario(
        name=name,
        description=description,
        workload=workload,
        faults=faults,
        recovery=recovery,
        measure=measure,
        launch=launch,
        gate=gate,
        source=file,
        raw=raw,
    )
    cross_check(scenario, file)
    return scenario


def _tagged(
    cls: type[Tagged], data: Any, registry: Registry[Any], file: str, prefix: str, default_kind: str | None = None
) -> Tagged:
    """A spec whose extra keys are the knobs of the plug-in named by its ``kind``."""
    if not isinstance(data, Mapping):
        raise ConfigError(file, prefix, "a table", data)
    kind = data.get("kind", default_kind)
    if kind is None:
        raise ConfigError(file, join(prefix, "kind"), f"one of {registry.choices()} (this key is required)")
    if not isinstance(kind, str) or kind not in registry:
        raise ConfigError(file, join(prefix, "kind"), f"one of {registry.choices()}", kind)
    plugin = registry[kind]
    common = {f.name for f in dataclasses.fields(cls) if f.name != "params"}
    allowed = common | {f.name for f in dataclasses.fields(plugin.params)}
    for key in data:
        if key not in allowed:
            raise ConfigError(
                file, join(prefix, key), f"one of {', '.join(sorted(allowed))} (for kind {kind!r})", UNKNOWN_KEY
            )
    own = {k: v for k, v in data.items() if k not in common}
    params: object = build(plugin.params, own, file=file, prefix=prefix)
    base = build(cls, {k: v for k, v in data.items() if k in common}, file=file, prefix=prefix)
    return replace(base, kind=kind, params=params)


def _recovery(data: Any, file: str, default: str) -> RecoverySpec:
    """``[recovery]``; ``default``: the strategy when it names none (the workload's own,
    for a workload that declares one, else the registered default)."""
    if not isinstance(data, Mapping):
        raise ConfigError(file, "recovery", "a table", data)
    strategy = data.get("strategy", default)
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise ConfigError(file, "recovery.strategy", f"one of {STRATEGIES.choices()}", strategy)
    chosen: object = None
    for key, value in data.items():
        if key == "strategy":
            continue
        if key not in STRATEGIES:
            raise ConfigError(
                file,
                f"recovery.{key}",
                f"'strategy' or a table named after a strategy ({STRATEGIES.choices()})",
                UNKNOWN_KEY,
            )
        params: object = build(STRATEGIES[key].params, value, file=file, prefix=f"recovery.{key}")
        if key == strategy:
            chosen = params
    if chosen is None:
        chosen = STRATEGIES[strategy].params()
    return RecoverySpec(strategy=strategy, params=chosen)


def validate_gate(data: Any, *, file: str, prefix: str = "gate") -> GateSpec:
    """The ``[gate]`` table: the one place its keys are checked (a scenario file, a run's
    run.json and the gate's command-line options all come through here)."""
    gate = build(GateSpec, data, file=file, prefix=prefix)
    check_figure(gate.metric, file=file, key=join(prefix, "metric"))
    for i, slo in enumerate(gate.slo):
        check_figure(slo.metric, file=file, key=join(prefix, f"slo.{i}.metric"))
        if slo.min is None and slo.max is None:
            raise ConfigError(file, join(prefix, f"slo.{i}"), "min, max or both", to_dict(slo))
        if slo.min is not None and slo.max is not None and slo.min > slo.max:
            raise ConfigError(file, join(prefix, f"slo.{i}.max"), f"a bound not below min ({slo.min:g})", slo.max)
    return gate


def check_figure(name: str, *, file: str, key: str) -> None:
    """A figure name (a column of trials.csv), or an error naming where it came from. A
    phase must be one that some strategy has: a typo would otherwise gate nothing."""
    if figures.is_phase(name):
        phases = known_phases()
        if figures.phase_name(name) not in phases:
            raise ConfigError(
                file, key, "a phase some strategy has: " + ", ".join(map(figures.phase_column, phases)), name
            )
    elif not figures.is_figure(name):
        raise ConfigError(file, key, f"a figure ({figures.known()})", name)


def known_phases() -> list[str]:
    """Every phase a recovery can have: detection, each registered strategy's own phases
    (plugins' included), and the catch-up after them."""
    own = sorted({phase for name in STRATEGIES.names() for phase, _ in STRATEGIES[name].phases})
    return ["detect", *(p for p in own if p not in ("detect", "catchup")), "catchup"]


def default_strategy() -> str:
    """The strategy of a scenario that names none (the one declared ``default``)."""
    return next(name for name in STRATEGIES.names() if STRATEGIES[name].default)
