"""Scenario files: TOML in, frozen dataclasses and sweep points out.

A scenario is ``workload x fault(s) x recovery strategy x sweep x gate``. Sweeps and
``--set`` overrides are applied to the parsed TOML *before* validation, so an override
is checked exactly like a value written in the file and every error names the dotted
key it came from.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from bench.config import UNKNOWN_KEY, ConfigError, bounded, build, join, to_dict
from bench.sweep import flatten_sweep, label, set_path
from bench.faults import FAULTS, FaultSpec, check_fault
from bench.metrics import FIGURES, is_figure
from bench.registry import Plugin, Registry
from bench.strategies import STRATEGIES
from bench.workloads import WORKLOADS


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkloadSpec:
    kind: str = "ddp"
    """A registered workload (``ftbench list --workloads``)."""
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """``auto`` picks NCCL when every rank can have its own GPU, else gloo."""
    world_size: int = bounded(4, ge=2, le=256)
    """Ranks at the start of a trial."""
    steps: int = bounded(200, ge=1)
    """Steps every rank agrees to run (a fixed count: a time limit would make the first
    rank to finish look like a crash to the others)."""
    warmup_steps: int = bounded(5, ge=0)
    """Leading steps left out of the fault-free step-time median."""
    pg_timeout_s: float = bounded(30.0, gt=0)
    """Process-group timeout, passed explicitly (gloo's default never fires in practice)."""
    params: Any = None
    """The kind's own knobs, written flat in ``[workload]``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoverySpec:
    strategy: str = "failstop"
    """A registered strategy (``ftbench list --strategies``)."""
    params: Any = None
    """Knobs of the chosen strategy, from ``[recovery.<strategy>]``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasureSpec:
    trials: int = bounded(5, ge=1)
    """Repetitions of every point."""
    seed: int = bounded(0, ge=0)
    """Seeds data and model: the same in every trial of a point, so that trials differ
    only in timing and each can be compared with the fault-free reference."""
    deadline_s: float = bounded(120.0, gt=0)
    """Wall-clock limit of one trial; past it everything is killed and the trial is
    recorded as ``hung``."""
    reference: bool = False
    """Run one fault-free trial per point first: ``loss_delta`` needs it, and ``goodput``
    and ``degraded_step_ratio`` then use its median step time."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchSpec:
    start_method: Literal["forkserver", "spawn"] = "forkserver"
    """How the local launcher starts ranks. ``forkserver`` forks them from a process
    that already imported torch (tens of ms); ``spawn`` starts fresh interpreters and
    pays the import (seconds) like a cold job would."""
    network: Literal["auto", "loopback", "namespaces"] = "auto"
    """``namespaces``: every host in a network namespace of its own, linked through a
    bridge (needed by link faults; root only). ``auto``: namespaces when a link fault
    is in the scenario, else everything on loopback."""
    wire_packets: bool = False
    """With namespaces: turn TCP segmentation offload off so that link faults see
    MTU-sized packets, as on a wire (per-packet loss and corruption then mean what they
    say), at the price of a slower clean link. Off: 64 KiB super-packets, as with a
    NIC doing TSO (netem on such a host behaves the same)."""
    ranks_per_host: int = bounded(1, ge=1)
    """Ranks per host: a fault with ``target = { host = k }`` hits all ranks of host k
    at once (node loss), and link faults act on a host's network namespace."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SLOSpec:
    metric: str
    """A figure (column of trials.csv)."""
    stat: Literal["median", "mean", "min", "max", "p90", "p95", "p99"] = "median"
    """Statistic over a point's trials that the bounds apply to."""
    min: float | None = None
    """Lower bound (inclusive)."""
    max: float | None = None
    """Upper bound (inclusive)."""
    point: str | None = None
    """Only points whose label contains this text (default: every point)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GateSpec:
    metric: str = "ttr_s"
    """Figure compared between baseline and candidate."""
    factor: float = bounded(1.10, ge=1.0)
    """Candidate median above factor x baseline median is a regression..."""
    floor_s: float = bounded(0.01, ge=0)
    """...if it is also above it by more than this absolute amount..."""
    alpha: float = bounded(0.05, gt=0, lt=1)
    """...and a two-sided Mann-Whitney U test gives p below this."""
    min_trials: int = bounded(7, ge=2)
    """Fewer trials on either side is "insufficient", which is not a pass."""
    slo: tuple[SLOSpec, ...] = ()
    """Absolute service levels, checked on a single run."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Scenario:
    name: str
    description: str
    workload: WorkloadSpec
    faults: tuple[FaultSpec, ...]
    recovery: RecoverySpec
    measure: MeasureSpec
    launch: LaunchSpec
    gate: GateSpec
    sweep: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    source: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The parsed TOML with overrides applied, before the sweep: points derive from it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    """One cell of a scenario's sweep: a fully resolved configuration."""

    scenario: Scenario
    values: tuple[tuple[str, Any], ...]
    """The sweep assignments that made this point (empty without a sweep)."""
    label: str
    point_hash: str


TOP_KEYS = ("name", "description", "workload", "faults", "recovery", "measure", "launch",
            "sweep", "gate")


def load(path: str | Path, overrides: Sequence[tuple[str, Any]] = ()) -> Scenario:
    """Read and validate a scenario file, applying ``--set`` style overrides."""
    path = Path(path)
    file = str(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(file, "", "a readable file", err.strerror) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(file, "", "valid TOML", str(err)) from None
    raw.setdefault("name", path.stem)
    return parse(raw, file=file, overrides=overrides)


def parse(raw: Mapping[str, Any], *, file: str, overrides: Sequence[tuple[str, Any]] = ()) -> Scenario:
    raw = copy.deepcopy(dict(raw))
    sweep = flatten_sweep(raw.pop("sweep", {}), file)
    for key, value in overrides:
        set_path(raw, key, value, file=file, origin="--set")
        sweep.pop(key, None)  # an explicit value replaces that axis of the sweep
    scenario = _validate(raw, file)
    for key, values in sweep.items():
        for i, value in enumerate(values):
            trial_raw = copy.deepcopy(raw)
            set_path(trial_raw, key, value, file=file, origin=f"sweep.{key}.{i}")
            _validate(trial_raw, file, context=f"sweep {key} = {value!r}")
    return replace(scenario, sweep=tuple((k, tuple(v)) for k, v in sweep.items()), raw=raw)


def points(scenario: Scenario) -> list[Point]:
    """Expand the sweep (a cartesian product, in file order) into validated points."""
    keys = [k for k, _ in scenario.sweep]
    result = []
    for combo in itertools.product(*(v for _, v in scenario.sweep)):
        raw = copy.deepcopy(dict(scenario.raw))
        for key, value in zip(keys, combo):
            set_path(raw, key, value, file=scenario.source, origin=key)
        resolved = replace(_validate(raw, scenario.source), sweep=scenario.sweep, raw=raw)
        values = tuple(zip(keys, combo))
        result.append(
            Point(scenario=resolved, values=values, label=label(scenario.name, values),
                  point_hash=point_hash(resolved))
        )
    return result


def identity(scenario: Scenario) -> dict[str, Any]:
    """What makes two points the same measurement: not the name, trial count or gate."""
    return {
        "workload": to_dict(scenario.workload),
        "faults": to_dict(scenario.faults),
        "recovery": to_dict(scenario.recovery),
        "launch": to_dict(scenario.launch),
        "seed": scenario.measure.seed,
    }


def point_hash(scenario: Scenario) -> str:
    canonical = json.dumps(identity(scenario), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


# --- validation -------------------------------------------------------------------------


def _validate(raw: Mapping[str, Any], file: str, context: str = "") -> Scenario:
    try:
        return _validate_inner(raw, file)
    except ConfigError as err:
        if context:
            raise ConfigError(err.file, err.key, f"{err.expected} (with {context})", err.got) from None
        raise


def _validate_inner(raw: Mapping[str, Any], file: str) -> Scenario:
    for key in raw:
        if key not in TOP_KEYS:
            raise ConfigError(file, key, f"one of {', '.join(TOP_KEYS)}", UNKNOWN_KEY)
    name = raw.get("name", "")
    if not isinstance(name, str) or not name:
        raise ConfigError(file, "name", "a non-empty string", name)
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(file, "description", "a string", description)

    workload = _tagged(WorkloadSpec, raw.get("workload", {}), WORKLOADS, file, "workload", default_kind="ddp")
    faults_raw = raw.get("faults", [])
    if not isinstance(faults_raw, list):
        raise ConfigError(file, "faults", "an array of tables ([[faults]])", faults_raw)
    faults = tuple(
        _tagged(FaultSpec, f, FAULTS, file, f"faults.{i}") for i, f in enumerate(faults_raw)
    )
    recovery = _recovery(raw.get("recovery", {}), file)
    measure = build(MeasureSpec, raw.get("measure", {}), file=file, prefix="measure")
    launch = build(LaunchSpec, raw.get("launch", {}), file=file, prefix="launch")
    gate = build(GateSpec, raw.get("gate", {}), file=file, prefix="gate")

    scenario = Scenario(
        name=name, description=description, workload=workload, faults=faults,
        recovery=recovery, measure=measure, launch=launch, gate=gate, source=file, raw=raw,
    )
    _cross_check(scenario, file)
    return scenario


def _tagged(cls: type, data: Any, registry: Registry[Plugin], file: str, prefix: str,
            default_kind: str | None = None) -> Any:
    """A spec whose extra keys are the knobs of the plug-in named by its ``kind``."""
    if not isinstance(data, Mapping):
        raise ConfigError(file, prefix, "a table", data)
    kind = data.get("kind", default_kind)
    if kind is None:
        raise ConfigError(file, join(prefix, "kind"), f"one of {registry.choices()} (this key is required)")
    if kind not in registry:
        raise ConfigError(file, join(prefix, "kind"), f"one of {registry.choices()}", kind)
    plugin = registry[kind]
    common = {f for f in cls.__dataclass_fields__ if f != "params"}  # type: ignore[attr-defined]
    allowed = common | set(plugin.params.__dataclass_fields__)
    for key in data:
        if key not in allowed:
            raise ConfigError(file, join(prefix, key), f"one of {', '.join(sorted(allowed))} (for kind {kind!r})",
                              UNKNOWN_KEY)
    own = {k: v for k, v in data.items() if k not in common}
    params = build(plugin.params, own, file=file, prefix=prefix)
    base = build(cls, {k: v for k, v in data.items() if k in common}, file=file, prefix=prefix)
    return replace(base, kind=kind, params=params)


def _recovery(data: Any, file: str) -> RecoverySpec:
    if not isinstance(data, Mapping):
        raise ConfigError(file, "recovery", "a table", data)
    strategy = data.get("strategy", "failstop")
    if strategy not in STRATEGIES:
        raise ConfigError(file, "recovery.strategy", f"one of {STRATEGIES.choices()}", strategy)
    chosen = None
    for key, value in data.items():
        if key == "strategy":
            continue
        if key not in STRATEGIES:
            raise ConfigError(
                file, f"recovery.{key}",
                f"'strategy' or a table named after a strategy ({STRATEGIES.choices()})", UNKNOWN_KEY,
            )
        params = build(STRATEGIES[key].params, value, file=file, prefix=f"recovery.{key}")
        if key == strategy:
            chosen = params
    if chosen is None:
        chosen = STRATEGIES[strategy].params()
    return RecoverySpec(strategy=strategy, params=chosen)


def _cross_check(s: Scenario, file: str) -> None:
    w = s.workload
    if w.warmup_steps >= w.steps:
        raise ConfigError(file, "workload.warmup_steps", f"fewer than workload.steps ({w.steps})", w.warmup_steps)
    for i, f in enumerate(s.faults):
        check_fault(f, world_size=w.world_size, steps=w.steps, ranks_per_host=s.launch.ranks_per_host,
                    file=file, where=f"faults.{i}")
    if s.recovery.strategy == "torchft":
        if w.kind != "ddp":
            raise ConfigError(file, "workload.kind", "'ddp' with strategy torchft (its replicas train through "
                              "TorchFT's DistributedDataParallel)", w.kind)
        for i, f in enumerate(s.faults):
            if FAULTS[f.kind].rank_side:
                raise ConfigError(file, f"faults.{i}.kind", "a fault that acts from outside the rank with strategy "
                                  "torchft (its collectives do not pass through ftbench's hooks)", f.kind)
    links = [i for i, f in enumerate(s.faults) if FAULTS[f.kind].family == "link"]
    if links and s.launch.network == "loopback":
        raise ConfigError(file, "launch.network", "'auto' or 'namespaces' (link faults need namespaces)", "loopback")
    if (links or s.launch.network == "namespaces") and s.recovery.strategy not in ("failstop", "reinit"):
        raise ConfigError(file, "recovery.strategy",
                          "'failstop' or 'reinit' with network namespaces (their ranks are started by ftbench's "
                          "own launcher, which puts each host in its namespace)", s.recovery.strategy)
    if w.world_size % s.launch.ranks_per_host:
        raise ConfigError(file, "launch.ranks_per_host", f"a divisor of workload.world_size ({w.world_size})",
                          s.launch.ranks_per_host)
    if not is_figure(s.gate.metric):
        raise ConfigError(file, "gate.metric", f"a figure ({', '.join(FIGURES)})", s.gate.metric)
    for i, slo in enumerate(s.gate.slo):
        if not is_figure(slo.metric):
            raise ConfigError(file, f"gate.slo.{i}.metric", f"a figure ({', '.join(FIGURES)})", slo.metric)
        if slo.min is None and slo.max is None:
            raise ConfigError(file, f"gate.slo.{i}", "min, max or both", to_dict(slo))


def uses_namespaces(scenario: Scenario) -> bool:
    """Whether the trials of ``scenario`` run each host in a network namespace."""
    network = scenario.launch.network
    return network == "namespaces" or (
        network == "auto" and any(FAULTS[f.kind].family == "link" for f in scenario.faults))
