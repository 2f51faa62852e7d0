"""all_reduce loop with nccl-tests' figures.

``algbw = bytes / time`` and ``busbw = algbw * 2 (n - 1) / n``: the bus bandwidth of a
ring all_reduce, comparable across world sizes (nccl-tests, doc/PERFORMANCE.md).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from bench.rank.comm import CollectiveError, Collectives
from bench.rank.workload import Workload
from bench.workloads.allreduce import AllReduceParams


class AllReduceWorkload(Workload):
    params: AllReduceParams

    def __init__(self, params: AllReduceParams, *, seed: int, world_size: int, device: torch.device) -> None:
        super().__init__(params, seed=seed, world_size=world_size, device=device)
        self.elements = max(1, params.size_bytes // 4)
        self.buf = torch.empty(self.elements, dtype=torch.float32, device=device)
        self.comm: Collectives | None = None

    def attach(self, comm: Collectives) -> None:
        self.comm = comm

    def step(self, step: int) -> dict[str, Any]:
        assert self.comm is not None
        n = self.comm.group_size
        # Small integers sum exactly in float32, so every element has one right answer.
        self.buf.fill_(float(self.comm.group_rank + 1))
        start = time.perf_counter()
        self.comm.all_reduce(self.buf)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - start
        nbytes = self.elements * 4
        algbw = nbytes / elapsed / 1e9
        fields: dict[str, Any] = {
            "bytes": nbytes,
            "time_s": elapsed,
            "algbw_gbps": algbw,
            "busbw_gbps": algbw * 2 * (n - 1) / n,
        }
        if self.params.check:
            expected = n * (n + 1) / 2
            # One pass that allocates nothing: counting mismatches on every step would
            # widen a bool mask to int64 (8 bytes an element), and glibc returns and
            # re-faults such a buffer often enough to make step times a lottery.
            low, high = torch.aminmax(self.buf)
            right = low.item() == high.item() == expected  # NaN compares unequal
            wrong = 0 if right else int((self.buf != expected).sum().item())
            fields["wrong_elements"] = wrong
            if wrong:
                raise CollectiveError(f"all_reduce result wrong in {wrong} of {self.elements} elements", "bad_result")
        return fields
