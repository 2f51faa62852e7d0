"""``ddp``: a small MLP trained with DistributedDataParallel on seeded synthetic data."""

from __future__ import annotations

from dataclasses import dataclass

from bench.scenario.config import bounded
from bench.scenario.registry import Plugin
from bench.scenario.workload import WORKLOADS


@dataclass(frozen=True, kw_only=True, slots=True)
class DDPParams:
    in_features: int = bounded(64, ge=1)
    """Width of the synthetic inputs."""
    hidden: int = bounded(256, ge=1)
    """Width of each hidden layer of the MLP."""
    layers: int = bounded(1, ge=1, le=64)
    """Number of hidden layers (each Linear + ReLU)."""
    batch_per_rank: int = bounded(32, ge=1)
    """Samples per rank per step in the full world; the global batch stays fixed after a
    shrink, so survivors take bigger shares and the loss curve stays comparable."""
    lr: float = bounded(0.01, gt=0)
    """SGD learning rate."""
    momentum: float = bounded(0.9, ge=0, lt=1)
    """SGD momentum (its buffers are optimizer state that recovery has to carry)."""
    checksum_every: int = bounded(0, ge=0)
    """Opt-in silent-data-corruption detector: every this many steps the ranks compare
    their parameters' checksums (one small all_reduce); a disagreement is detected
    (``how = "checksum"``) and, under reinit, repaired from a majority replica. 0: off."""


WORKLOADS.register(
    Plugin(
        name="ddp",
        params=DDPParams,
        impl="bench.workloads.ddp.impl:DDPWorkload",
        summary="MLP trained with DistributedDataParallel on seeded synthetic data",
    )
)
