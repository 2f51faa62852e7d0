"""Link faults on a host's network namespace (root only; see injectors.link)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.scenario.config import bounded
from bench.scenario.faults import FAULTS, DurationParams, FaultKind


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


for _name, _params, _cls, _summary in (
    ("partition", DurationParams, "Partition", "drop everything to and from the target host (blackhole)"),
    ("link_down", DurationParams, "LinkDown", "take the target host's link down"),
    ("tcp_reset", DurationParams, "TcpReset", "answer the target host's incoming TCP with resets"),
    ("loss", LossParams, "Loss", "drop a share of the packets arriving at the target host"),
    ("rate_limit", RateParams, "RateLimit", "cap the target host's bandwidth"),
    ("delay", DelayParams, "Delay", "delay (and jitter) packets arriving at the target host"),
    ("corrupt", CorruptParams, "Corrupt", "flip payload bits of packets arriving at the target host"),
):
    FAULTS.register(
        FaultKind(name=_name, params=_params, impl=f"injectors.link.faults:{_cls}", family="link", summary=_summary)
    )
