"""The fault model: kinds, targets and triggers of a scenario's ``[[faults]]``.

A fault kind pairs its knobs (validated from the scenario) with the injector in
:mod:`injectors` that carries it out; the scenario names the fault, the injector picks
the mechanism. Faults that act *inside* a rank (a hang in a collective, a bit flip in a
gradient bucket) also name their rank-side hook: the harness arms it with a real-time
signal and the rank records the injection at the moment the hook acts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bench.config import ConfigError, bounded, to_dict
from bench.registry import Plugin, Registry


@dataclass(frozen=True, kw_only=True, slots=True)
class FaultKind(Plugin):
    rank_side: str | None = None
    """``module:Class`` of the hook the rank runs, for faults that act inside a rank."""
    family: str = "process"
    """Taxonomy family (DESIGN.md): process, hang, slow, collective, data, link. Control-plane
faults are process faults aimed at a component (``target = { component = ... }``)."""


FAULTS: Registry[FaultKind] = Registry("fault kind")

COMPONENTS = ("store", "lighthouse", "agent")


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
    torchrun's elastic agent."""

    def kinds(self) -> list[str]:
        set_ = {"ranks": bool(self.ranks), "one": self.one, "fraction": self.fraction is not None,
                "host": self.host is not None, "component": self.component is not None}
        return [k for k, v in set_.items() if v]


@dataclass(frozen=True, kw_only=True, slots=True)
class TriggerSpec:
    at_step: int | None = bounded(None, ge=1)
    """Fire once any rank has finished this step."""
    after_s: float | None = bounded(None, ge=0)
    """Fire this many seconds after the first step of the trial finished."""
    every_s: float | None = bounded(None, gt=0)
    """Fire every this many seconds (the first time ``every_s`` after the first step)."""
    mtbf_s: float | None = bounded(None, gt=0)
    """Fire at random, exponentially distributed intervals of this mean (seeded): the
    chaos schedule of TorchFT's punisher."""
    probability: float | None = bounded(None, gt=0, le=1)
    """Fire after each step with this probability (seeded)."""
    count: int = bounded(1, ge=1)
    """How many times ``every_s``, ``mtbf_s`` or ``probability`` fire."""

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


def check_fault(f: FaultSpec, *, world_size: int, steps: int, ranks_per_host: int, file: str, where: str) -> None:
    """Cross-field checks of one fault against the workload it will hit."""
    t, kind = f.target, FAULTS[f.kind]
    if len(t.kinds()) != 1:
        raise ConfigError(file, f"{where}.target", "exactly one of ranks, one, fraction, host, component",
                          to_dict(t))
    for j, r in enumerate(t.ranks):
        if not 0 <= r < world_size:
            raise ConfigError(file, f"{where}.target.ranks.{j}", f"a rank below world_size ({world_size})", r)
    if len(set(t.ranks)) != len(t.ranks):
        raise ConfigError(file, f"{where}.target.ranks", "distinct ranks", list(t.ranks))
    if len(t.ranks) >= world_size:
        raise ConfigError(file, f"{where}.target.ranks", "fewer ranks than world_size (someone must survive)",
                          list(t.ranks))
    hosts = world_size // ranks_per_host
    if t.host is not None and not (t.host < hosts and hosts > 1):
        raise ConfigError(file, f"{where}.target.host",
                          f"a host below {hosts} (world_size / launch.ranks_per_host), with more than one host",
                          t.host)
    if t.component is not None and (kind.rank_side or kind.family == "link"):
        raise ConfigError(file, f"{where}.target.component",
                          f"a rank target: {f.kind!r} acts on ranks, not on control-plane processes", t.component)
    trig = f.trigger
    if len(trig.kinds()) != 1:
        raise ConfigError(file, f"{where}.trigger", "exactly one of at_step, after_s, every_s, mtbf_s, probability",
                          to_dict(trig))
    if trig.count != 1 and trig.kinds()[0] in ("at_step", "after_s"):
        raise ConfigError(file, f"{where}.trigger.count", "1 with at_step or after_s (they fire once)", trig.count)
    if trig.at_step is not None and trig.at_step >= steps:
        raise ConfigError(file, f"{where}.trigger.at_step", f"a step below workload.steps ({steps})", trig.at_step)


# --- kinds ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class KillParams:
    signal: Literal["SIGKILL", "SIGTERM", "SIGSEGV"] = "SIGKILL"
    """SIGKILL: sudden death; SIGTERM: the default action (no handler), as a scheduler's
    stop; SIGSEGV: a crash with the crash path's own exit status."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DurationParams:
    duration_s: float = bounded(gt=0)
    """How long the fault lasts before it is undone."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StragglerParams:
    delay_s: float = bounded(gt=0)
    """Sleep before every collective of the target..."""
    duration_s: float = bounded(gt=0)
    """...for this long."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NoParams:
    """This fault kind has no knobs."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BitFlipParams:
    bit: int = bounded(27, ge=0, le=31)
    """Bit of the float32 word to flip (23-30: exponent, 31: sign, 0-22: mantissa)."""
    elements: int = bounded(1, ge=1)
    """How many elements of the bucket get the flip (seeded choice)."""
    when: Literal["after_reduce", "before_reduce"] = "after_reduce"
    """``after_reduce``: the reduced gradient is wrong on the target only, so replicas
    diverge (a memory or link error). ``before_reduce``: the target's contribution is
    wrong, so every replica applies the same wrong gradient (a compute error)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LossParams:
    percent: float = bounded(gt=0, le=100)
    """Share of the packets arriving at the target that are dropped."""
    duration_s: float = bounded(gt=0)


@dataclass(frozen=True, kw_only=True, slots=True)
class RateParams:
    rate_mbit: float = bounded(gt=0)
    """Bandwidth cap of the target's link, both directions (tbf)."""
    duration_s: float = bounded(gt=0)


@dataclass(frozen=True, kw_only=True, slots=True)
class DelayParams:
    delay_ms: float = bounded(gt=0)
    """Added to every packet arriving at the target..."""
    jitter_ms: float = bounded(0.0, ge=0)
    """...plus or minus this much (uniform)."""
    duration_s: float = bounded(gt=0)


@dataclass(frozen=True, kw_only=True, slots=True)
class CorruptParams:
    percent: float = bounded(gt=0, le=100)
    """Share of the packets arriving at the target whose payload gets a flipped bit,
    with the TCP checksum recomputed: real silent corruption, not loss."""
    duration_s: float = bounded(gt=0)


def _register(name: str, params: type, impl: str, summary: str, family: str, rank_side: str | None = None) -> None:
    FAULTS.register(FaultKind(name=name, params=params, impl=impl, summary=summary, family=family,
                              rank_side=rank_side))


_register("kill", KillParams, "injectors.signals:Kill", "SIGKILL / SIGTERM / SIGSEGV the target processes",
          "process")
_register("stall", DurationParams, "injectors.signals:Stall", "SIGSTOP the targets for duration_s, then SIGCONT",
          "hang")
_register("hang", DurationParams, "injectors.rankside:Arm", "hang inside the target's next collective for duration_s",
          "hang", "injectors.rankside:Hang")
_register("gil", DurationParams, "injectors.rankside:Arm", "hold the GIL in the target for duration_s (deadlock)",
          "hang", "injectors.rankside:HoldGIL")
_register("straggler", StragglerParams, "injectors.rankside:Arm",
          "delay every collective of the target by delay_s for duration_s", "slow", "injectors.rankside:Straggler")
_register("raise", NoParams, "injectors.rankside:Arm", "raise inside the target's next collective", "collective",
          "injectors.rankside:Raise")
_register("abort", NoParams, "injectors.rankside:Arm", "abort the target's process group (communicator)",
          "collective", "injectors.rankside:Abort")
_register("bitflip", BitFlipParams, "injectors.rankside:Arm", "flip bits of a gradient bucket on the target (SDC)",
          "data", "injectors.rankside:BitFlip")

for _name, _params, _cls, _summary in (
    ("partition", DurationParams, "Partition", "drop everything to and from the target host (blackhole)"),
    ("link_down", DurationParams, "LinkDown", "take the target host's link down"),
    ("tcp_reset", DurationParams, "TcpReset", "answer the target host's incoming TCP with resets"),
    ("loss", LossParams, "Loss", "drop a share of the packets arriving at the target host"),
    ("rate_limit", RateParams, "RateLimit", "cap the target host's bandwidth"),
    ("delay", DelayParams, "Delay", "delay (and jitter) packets arriving at the target host"),
    ("corrupt", CorruptParams, "Corrupt", "flip payload bits of packets arriving at the target host"),
):
    _register(_name, _params, f"injectors.link:{_cls}", _summary, "link")
