"""Workloads: what the ranks compute while faults are injected.

Each workload is a plug-in: its knobs (a dataclass, validated from ``[workload]``) and a
rank-side implementation (imported lazily, it needs torch). See :mod:`bench.workloads.base`
for the contract.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.config import bounded
from bench.registry import Plugin, Registry

WORKLOADS: Registry[Plugin] = Registry("workload")


@dataclass(frozen=True, kw_only=True, slots=True)
class AllReduceParams:
    size_bytes: int = bounded(1 << 20, ge=4)
    """Bytes per all_reduce (float32 elements, so rounded down to a multiple of 4)."""
    check: bool = True
    """Verify every result against the expected sum, so wrong data cannot pass unseen."""


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
        name="allreduce",
        params=AllReduceParams,
        impl="bench.workloads.allreduce:AllReduceWorkload",
        summary="loop of all_reduce; time, algbw and busbw as nccl-tests computes them",
    )
)
WORKLOADS.register(
    Plugin(
        name="ddp",
        params=DDPParams,
        impl="bench.workloads.ddp:DDPWorkload",
        summary="MLP trained with DistributedDataParallel on seeded synthetic data",
    )
)
