"""The fault model: kinds, targets and triggers of a scenario's ``[[faults]]``.

A fault kind pairs its knobs (validated from the scenario) with the code in
:mod:`injectors` that carries it out; the scenario names the fault, the injector picks
the mechanism. A fault that acts *inside* a rank (a hang in a collective, a bit flip in
a gradient bucket) is a hook the rank runs: the harness arms it with a real-time signal
(:class:`injectors.rankside.Arm`) and the rank records the injection when the hook acts.
The knobs reach either as keyword arguments (:meth:`FaultSpec.knobs`).

Each module of this package declares kinds of one mechanism (``process``: signals to
processes, in the families ``process`` and ``hang``; ``rankside``: hooks in a rank;
``link``: a host's network; ``machine``: the machine's memory and storage); a new
kind is a new module or an entry in one, found by
:func:`bench.scenario.registry.discover`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from bench.scenario.config import ConfigError, bounded, to_dict
from bench.scenario.limits import MAX_SECONDS
from bench.scenario.registry import Plugin, Registry, load_path

if TYPE_CHECKING:
    from injectors.base import Injector

Family = Literal["process", "hang", "slow", "collective", "data", "link", "machine"]


@dataclass(frozen=True, kw_only=True, slots=True)
class FaultKind(Plugin):
    """``impl`` is the harness-side injector, or the hook a rank runs (``rank_side``)."""

    family: Family
    """Taxonomy family (docs/faults.md): process, hang, slow, collective, data, link, machine."""
    rank_side: bool = False
    """The fault acts inside the rank: ``impl`` is its hook, armed by a signal."""
    hits_components: bool = False
    """Whether ``target = { component = ... }`` makes sense: signals reach any process,
    hooks and links only ranks and their hosts (control-plane faults are process faults
    aimed at a component)."""
    whole_host: bool = False
    """The fault takes a whole host away, its agent with it: it needs host agents
    (``launch.agents``) and ``target = { host = k }``."""
    machine: str = ""
    """``module:function(params) -> str | None``: why this machine cannot serve the kind
    (no root, no memory cgroup...), asked when a scenario is read, so that such a file
    is refused rather than failing each trial; "" for kinds that change nothing of the
    machine. Such a kind is set up by the harness on its own machine, so it is refused
    with host agents (``launch.agents``)."""

    def injector(self, spec: FaultSpec, index: int) -> Injector:
        """What the harness fires for fault ``index``: the injector, or the signal that
        arms the rank-side hook."""
        if self.rank_side:
            from injectors.rankside import Arm

            return Arm(fault_index=index)
        injector: Injector = self.load()(**spec.knobs())
        return injector


FAULTS: Registry[FaultKind] = Registry("fault kind")

COMPONENTS = ("store", "lighthouse", "agent")
MAX_FIRINGS = 10_000
"""Firings of one fault in a trial at most (``trigger.count``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TargetSpec:
    ranks: tuple[int, ...] = ()
    """Launch ranks to hit (stable ids: rank 2 stays "2" after a shrink renumbers it)."""
    one: bool = False
    """One live rank, drawn at random (seeded by measure.seed, the trial and the fault)
    every time the fault fires."""
    fraction: float | None = bounded(None, gt=0, lt=1)
    """A random subset of the live ranks of this size (at least one), drawn likewise."""
    host: int | None = bounded(None, ge=0)
    """Every rank of host ``host`` (``launch.ranks_per_host`` ranks each): node loss."""
    component: Literal["store", "lighthouse", "agent"] | None = None
    """A control-plane process: the launcher's c10d store, the torchft lighthouse or
    torchrun's elastic agent (which of them exist depends on the strategy)."""

    def kinds(self) -> list[str]:
        chosen = {
            "ranks": bool(self.ranks),
            "one": self.one,
            "fraction": self.fraction is not None,
            "host": self.host is not None,
            "component": self.component is not None,
        }
        return [k for k, v in chosen.items() if v]

    def text(self) -> str:
        """How trials.csv names a target before it is resolved (random targets vary)."""
        if self.ranks:
            return ",".join(map(str, self.ranks))
        if self.host is not None:
            return f"host{self.host}"
        if self.component is not None:
            return self.component
        return "one" if self.one else f"fraction{self.fraction:g}"


@dataclass(frozen=True, kw_only=True, slots=True)
class TriggerSpec:
    at_step: int | None = bounded(None, ge=1)
    """Fire once any rank has finished this step."""
    after_s: float | None = bounded(None, ge=0, le=MAX_SECONDS)
    """Fire this many seconds after the first step of the trial finished."""
    every_s: float | None = bounded(None, gt=0, le=MAX_SECONDS)
    """Fire every this many seconds (the first time ``every_s`` after the first step)."""
    mtbf_s: float | None = bounded(None, gt=0, le=MAX_SECONDS)
    """Fire at random, exponentially distributed intervals of this mean (seeded): the
    chaos schedule of TorchFT's punisher."""
    probability: float | None = bounded(None, gt=0, le=1)
    """Fire after each step with this probability (seeded)."""
    count: int = bounded(1, ge=1, le=MAX_FIRINGS)
    """How many times ``every_s``, ``mtbf_s`` or ``probability`` fire (the schedule of
    ``mtbf_s`` is drawn in advance, so this is bounded); with ``share``, the arrivals of
    the whole mix."""
    share: float | None = bounded(None, gt=0, le=1e6)
    """With ``mtbf_s``: this entry is one of a failure mix (:mod:`bench.scenario.mix`).
    The entries with a share are one arrival process (their ``mtbf_s``, ``count`` and
    ``jitter`` agree) and each arrival fires one of them, drawn by share (normalised:
    any positive numbers, such as a table's percentages)."""
    jitter: Literal["none", "step"] = "none"
    """``step``: once the trigger is met, fire at a uniformly drawn point of the next
    step (seeded, laid from the ranks' step boundary) instead of at once, so that
    injections land anywhere in a step, as real faults do; where they landed is
    ``inject_phase`` in trials.csv."""

    def kinds(self) -> list[str]:
        return [k for k in ("at_step", "after_s", "every_s", "mtbf_s", "probability") if getattr(self, k) is not None]


@dataclass(frozen=True, kw_only=True, slots=True)
class FaultSpec:
    kind: str
    """A registered fault kind (``ftbench list``)."""
    target: TargetSpec
    trigger: TriggerSpec
    params: object = None
    """The kind's own knobs, written flat in the fault's table."""

    def knobs(self) -> dict[str, Any]:
        """The kind's knobs as the keyword arguments its injector or hook takes."""
        knobs: dict[str, Any] = to_dict(self.params)
        return knobs


def check_fault(
    f: FaultSpec,
    *,
    world_size: int,
    steps: int,
    ranks_per_host: int,
    deadline_s: float,
    strategy: str,
    components: tuple[str, ...],
    file: str,
    where: str,
    agents: bool = False,
) -> None:
    """Cross-field checks of one fault against the workload it will hit, the strategy
    whose processes it may target (``components``), the trial's deadline and what the
    machine can serve (``agents``: the scenario runs under host agents)."""
    _check_target(f, world_size=world_size, ranks_per_host=ranks_per_host, file=file, where=where)
    _check_machine(f, agents=agents, file=file, where=where)
    t = f.target
    if t.component is not None and t.component not in components:
        raise ConfigError(
            file,
            f"{where}.target.component",
            f"a component of strategy {strategy} ({', '.join(components) or 'it has none'}); "
            "a target that does not exist is never injected",
            t.component,
        )
    _check_trigger(f, steps=steps, file=file, where=where)
    _check_end(f, deadline_s=deadline_s, file=file, where=where)


def _check_target(f: FaultSpec, *, world_size: int, ranks_per_host: int, file: str, where: str) -> None:
    t, kind = f.target, FAULTS[f.kind]
    if len(t.kinds()) != 1:
        raise ConfigError(file, f"{where}.target", "exactly one of ranks, one, fraction, host, component", to_dict(t))
    for j, r in enumerate(t.ranks):
        if not 0 <= r < world_size:
            raise ConfigError(file, f"{where}.target.ranks.{j}", f"a rank below world_size ({world_size})", r)
    if len(set(t.ranks)) != len(t.ranks):
        raise ConfigError(file, f"{where}.target.ranks", "distinct ranks", list(t.ranks))
    if len(t.ranks) >= world_size:
        raise ConfigError(
            file, f"{where}.target.ranks", "fewer ranks than world_size (someone must survive)", list(t.ranks)
        )
    hosts = world_size // ranks_per_host
    if t.host is not None and not (t.host < hosts and hosts > 1):
        raise ConfigError(
            file,
            f"{where}.target.host",
            f"a host below {hosts} (world_size / launch.ranks_per_host), with more than one host",
            t.host,
        )
    if t.component is not None and not kind.hits_components:
        raise ConfigError(
            file,
            f"{where}.target.component",
            f"a rank target: {f.kind!r} acts on ranks, not on control-plane processes",
            t.component,
        )


def _check_machine(f: FaultSpec, *, agents: bool, file: str, where: str) -> None:
    """A fault of the machine needs this machine's consent (and its harness: not agents)."""
    kind = FAULTS[f.kind]
    if not kind.machine:
        return
    if agents:
        raise ConfigError(
            file,
            f"{where}.kind",
            f"a fault other than {f.kind!r} with launch.agents = true (the harness sets it up on its own "
            "machine; host agents do not carry it out)",
            f.kind,
        )
    why = load_path(kind.machine)(f.params)
    if why:
        raise ConfigError(file, f"{where}.kind", f"a fault kind this machine can serve ({f.kind}: {why})", f.kind)


def _check_trigger(f: FaultSpec, *, steps: int, file: str, where: str) -> None:
    trig = f.trigger
    if len(trig.kinds()) != 1:
        raise ConfigError(
            file, f"{where}.trigger", "exactly one of at_step, after_s, every_s, mtbf_s, probability", to_dict(trig)
        )
    if trig.count != 1 and trig.kinds()[0] in ("at_step", "after_s"):
        raise ConfigError(file, f"{where}.trigger.count", "1 with at_step or after_s (they fire once)", trig.count)
    if trig.at_step is not None and trig.at_step >= steps:
        raise ConfigError(file, f"{where}.trigger.at_step", f"a step below workload.steps ({steps})", trig.at_step)


def _check_end(f: FaultSpec, *, deadline_s: float, file: str, where: str) -> None:
    """The fault must be over before the trial's deadline kills everything: its last
    firing (as far as the trigger fixes it) plus its ``duration_s``. A fault that
    would outlast the deadline measures the deadline, not a recovery."""
    trig = f.trigger
    name = "duration_s" if hasattr(f.params, "duration_s") else "grace_s"  # a drain lasts its grace period
    duration = getattr(f.params, name, None)
    duration = float(duration) if isinstance(duration, (int, float)) else 0.0
    if trig.after_s is not None:
        start, formula, key = trig.after_s, "trigger.after_s", "trigger.after_s"
    elif trig.every_s is not None:
        start, formula, key = trig.every_s * trig.count, "trigger.every_s x count", "trigger.every_s"
    else:  # at a step, or at random: it may fire right after the first step
        start, formula, key = 0.0, "", "duration_s"
    if duration:
        formula, key = f"{formula} + {name}" if formula else name, name
    if start + duration >= deadline_s:
        raise ConfigError(
            file,
            f"{where}.{key}",
            f"a fault that is over before measure.deadline_s ({deadline_s:g} s): {formula} = {start + duration:g} s",
            getattr(f.params, name, None) if key == name else getattr(trig, key.split(".")[1]),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class DurationParams:
    duration_s: float = bounded(gt=0, le=MAX_SECONDS)
    """How long the fault lasts before it is undone."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NoParams:
    """This fault kind has no knobs."""
