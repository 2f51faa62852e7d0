"""``ddp``: a small MLP trained with DistributedDataParallel on seeded synthetic data."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.scenario.config import ConfigError, bounded
from bench.scenario.workload import WORKLOADS, WorkloadPlugin

if TYPE_CHECKING:
    from bench.scenario.model import Scenario


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
    state_mb: float = bounded(0.0, ge=0, le=65536)
    """Size the state a recovery has to move: parameters plus SGD momentum buffers come
    to about this many MB (10^6 bytes) per rank, from a wide branch beside the MLP (see
    :func:`state_width`). 0: the MLP alone, as configured."""


#: Bytes per trained parameter that a recovery moves: the fp32 value and its fp32
#: momentum buffer (SGD's only optimizer state).
STATE_BYTES_PER_PARAM = 8


def mlp_params(p: DDPParams) -> int:
    """Trainable parameters of the configured MLP (weights and biases)."""
    n, width = 0, p.in_features
    for _ in range(p.layers):
        n += width * p.hidden + p.hidden
        width = p.hidden
    return n + width + 1


def state_width(p: DDPParams) -> int:
    """Width W of the wide layer that brings the state to ``state_mb``; 0 when the knob
    is off or the MLP alone already reaches it.

    The branch beside the MLP is Linear(in_features, hidden) + ReLU + Linear(hidden, W)
    + ReLU + Linear(W, 1, no bias): ``(in_features + 1) x hidden + W x (hidden + 2)``
    parameters, all trained, so checkpoints, heals and peer exchanges move them and every
    step all-reduces their gradient, as a real job's would. The bulk sits in a
    hidden x W matrix rather than a single wide layer on the inputs, so activations stay
    ``batch x W`` floats (62 MB per rank at 1 GB of state) instead of growing with the
    state."""
    if p.state_mb <= 0:
        return 0
    want = p.state_mb * 1e6 / STATE_BYTES_PER_PARAM - mlp_params(p) - (p.in_features + 1) * p.hidden
    return max(0, round(want / (p.hidden + 2)))


def state_params(p: DDPParams) -> int:
    """Trainable parameters of the whole model, branch included."""
    w = state_width(p)
    return mlp_params(p) + ((p.in_features + 1) * p.hidden + w * (p.hidden + 2) if w else 0)


def rank_memory_bytes(p: DDPParams, world_size: int) -> int:
    """A deliberately generous estimate of one rank's peak memory beyond torch itself,
    for validate (not a figure): parameters, gradients (DDP's buckets, which the
    gradients are views of when the branch exists), momentum, a state copy in flight
    (checkpoint load, a peer's state, the optimizer's load copy: two tensors per
    parameter), a retired generation's buckets (reinit keeps the old DDP wrapper
    alive), and the branch's activations for a survivor's larger share of the batch."""
    share = -(-world_size * p.batch_per_rank // max(1, world_size - 1))
    activations = 4 * share * (state_width(p) + p.hidden) * 4
    return 4 * state_params(p) * 6 + activations


def check(scenario: Scenario, file: str) -> None:
    """Refuse a state that cannot fit in this machine's memory with every rank of the
    world on it (simulated hosts share this machine; a run across real machines is
    judged as if it were here too: an over-cautious refusal, never a swapping run)."""
    p: DDPParams = scenario.workload.params
    if p.state_mb <= 0:
        return
    world = scenario.workload.world_size
    per_host = world
    need = per_host * (rank_memory_bytes(p, world) + TORCH_RANK_BYTES)
    have = physical_memory()
    if have and need > have:
        raise ConfigError(
            file,
            "workload.state_mb",
            f"a state that fits this machine's memory: {per_host} ranks here need about "
            f"{need / 2**30:.1f} GiB (parameters, gradients, momentum, a copy in flight, activations) "
            f"and it has {have / 2**30:.1f} GiB",
            p.state_mb,
        )


#: What a rank's torch, gloo and ftbench take before any state (measured RSS ~300 MB).
TORCH_RANK_BYTES = 400 * 2**20


def physical_memory() -> int:
    """Bytes of memory on this machine, 0 where the platform does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


WORKLOADS.register(
    WorkloadPlugin(
        name="ddp",
        params=DDPParams,
        impl="bench.workloads.ddp.impl:DDPWorkload",
        summary="MLP trained with DistributedDataParallel on seeded synthetic data",
        check=check,
    )
)
