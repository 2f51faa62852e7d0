"""``ddp``: a small MLP trained with DistributedDataParallel on seeded synthetic data."""

from __future__ import annotations

from dataclasses import dataclass

from bench.scenario.config import bounded
from bench.scenario.workload import WORKLOADS, Estimate, WorkloadPlugin


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
    shrink, so survivors take bigger shares and the loss curve stays comparable. At the
    default ``lr`` and ``momentum`` a global batch of 64 or more learns; 32 or fewer
    diverges within a few hundred steps (the small batch's curvature is the larger),
    as a real job's would: the loss figures then compare infinities."""
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


def memory(p: DDPParams, world_size: int) -> Estimate:
    """What one rank holds (:mod:`bench.scenario.memory`), generous on purpose where the
    state is sized, since 4 ranks of 1 GB come close to a 24 GB machine: parameters,
    gradients (DDP's buckets, which the gradients are views of when the branch exists),
    momentum, a retired generation's buckets (reinit keeps the old DDP wrapper alive),
    a state in flight (a checkpoint or a peer's serialised state being loaded, the copy
    the optimizer makes of the momentum it loads, reinit's copy of the model for its new
    wrapper), and activations for a survivor's larger share of the batch. Measured at 1
    GB with batch_per_rank 8 (one trial each, shared 2-core machine), rank peaks of 3.9
    (restart), 4.5 (reinit, no peer transfer), 4.9 (torchft) and 5.5 GB (nvrx-inprocess)
    against this estimate's 4.6 GB plus an idle rank's 0.4 GB; the ranks do not peak
    together, and the job's peak (12.4-18.1 GB, torchft's highest) stayed under the
    20.2 GB the check adds up for four ranks and the store."""
    n = 4.0 * state_params(p)
    share = -(-world_size * p.batch_per_rank // max(1, world_size - 1))
    width = p.hidden * (p.layers + 1) + state_width(p)
    return Estimate(
        knob="state_mb" if p.state_mb > 0 else "hidden",
        parts={
            "parameters": n,
            "gradients": n,
            "momentum": n,
            "a state in flight": 5 * n,
            "retired buckets": n,
            "activations": 4.0 * share * width * 4,
        },
    )


WORKLOADS.register(
    WorkloadPlugin(
        name="ddp",
        params=DDPParams,
        impl="bench.workloads.ddp.impl:DDPWorkload",
        summary="MLP trained with DistributedDataParallel on seeded synthetic data",
        memory=memory,
    )
)
