"""``allreduce``: a loop of all_reduce with nccl-tests' figures (time, algbw, busbw)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.scenario.config import bounded
from bench.scenario.workload import WORKLOADS, Estimate, WorkloadPlugin


@dataclass(frozen=True, kw_only=True, slots=True)
class AllReduceParams:
    size_bytes: int = bounded(1 << 20, ge=4)
    """Bytes per all_reduce (float32 elements, so rounded down to a multiple of 4)."""
    check: bool = True
    """Verify every result against the expected sum, so wrong data cannot pass unseen."""


def memory(params: AllReduceParams, world_size: int) -> Estimate:
    """The tensor, the expected result it is checked against, and gloo's receive buffer."""
    return Estimate(knob="size_bytes", parts={"tensors": 3.0 * params.size_bytes})


WORKLOADS.register(
    WorkloadPlugin(
        name="allreduce",
        params=AllReduceParams,
        impl="bench.workloads.allreduce.impl:AllReduceWorkload",
        memory=memory,
        rank_preload=(),  # no optimizer: its ranks never import torch._dynamo
        summary="loop of all_reduce; time, algbw and busbw as nccl-tests computes them",
    )
)
