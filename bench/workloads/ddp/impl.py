"""A small MLP trained with DistributedDataParallel on synthetic regression data.

Data and initial weights come from the seed and the step number only. The global batch
(``world_size x batch_per_rank`` at launch) stays the same after the world shrinks: the
survivors split it among themselves. Each rank scales its loss by the *global* batch
(times the group size where DDP's stock reducer averages), so the gradient is the exact
global mean in any world and a recovered run follows the fault-free reference up to
float rounding.
"""

from __future__ import annotations

import copy
import hashlib
from collections import Counter
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

from bench.rank.comm import Collectives, CorruptionDetected, site
from bench.rank.workload import Workload
from bench.workloads.ddp import DDPParams


class DDPWorkload(Workload):
    params: DDPParams

    def __init__(self, params: DDPParams, *, seed: int, world_size: int, device: torch.device) -> None:
        super().__init__(params, seed=seed, world_size=world_size, device=device)
        gen = torch.Generator().manual_seed(seed)
        layers: list[torch.nn.Module] = []
        width = params.in_features
        for _ in range(params.layers):
            layers += [torch.nn.Linear(width, params.hidden), torch.nn.ReLU()]
            width = params.hidden
        layers.append(torch.nn.Linear(width, 1))
        self.model = torch.nn.Sequential(*layers)
        with torch.no_grad():
            for p in self.model.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / max(1, p.shape[-1])) ** 0.5)
        self.model.to(device)
        self.teacher = torch.randn(params.in_features, 1, generator=gen)
        self.global_batch = world_size * params.batch_per_rank
        self.opt = self._optimizer()
        self.ddp: DistributedDataParallel | None = None
        self._retired: list[DistributedDataParallel] = []
        self.comm: Collectives | None = None

    def attach(self, comm: Collectives) -> None:
        self.comm = comm
        if self.ddp is not None:
            # Freeing the old wrapper would run the old gloo group's destructor, which joins
            # a worker thread that may still wait on a dead peer (until its timeout, or
            # forever). So the old wrapper is kept, and training moves to fresh copies of
            # the parameters and optimizer that its hooks do not know about.
            self._retired.append(self.ddp)
            state = self.state_dict()
            self.model = copy.deepcopy(self.model)
            self.opt = self._optimizer()
            self.opt.load_state_dict(state["opt"])
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.ddp = DistributedDataParallel(self.model, device_ids=ids)
        comm.attach_ddp(self.ddp)

    def _optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=self.params.lr, momentum=self.params.momentum)

    def batch(self, step: int, group_rank: int, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's share of the global batch of ``step``."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        x = torch.randn(self.global_batch, self.params.in_features, generator=gen)
        y = x @ self.teacher + 0.1 * torch.randn(self.global_batch, 1, generator=gen)
        lo = self.global_batch * group_rank // group_size
        hi = self.global_batch * (group_rank + 1) // group_size
        return x[lo:hi].to(self.device), y[lo:hi].to(self.device)

    def step(self, step: int) -> dict[str, Any]:
        assert self.ddp is not None and self.comm is not None
        x, y = self.batch(step, self.comm.group_rank, self.comm.group_size)
        self.opt.zero_grad(set_to_none=False)
        loss_share = ((self.ddp(x) - y) ** 2).sum() / self.global_batch
        # The gradient is the exact global mean in any world: stock DDP averages over the
        # group (so each share counts group_size times), an abortable layer sums.
        scale = self.comm.group_size if self.comm.averages else 1
        with site("backward"):
            (loss_share * scale).backward()
        self.opt.step()
        every = self.params.checksum_every
        if every and step % every == 0:
            self._compare_replicas()
        return {"loss_share": float(loss_share.item())}

    def _compare_replicas(self) -> None:
        """All-gather (as a sum of one-hot rows) every replica's L1 norm; replicas of DDP
        are bitwise identical, so any difference is corruption."""
        assert self.comm is not None
        norms = torch.zeros(self.comm.group_size, dtype=torch.float64)
        norms[self.comm.group_rank] = self._l1()
        self.comm.all_reduce(norms)
        values = norms.tolist()
        majority, votes = Counter(values).most_common(1)[0]
        if votes != len(values):
            bad = [i for i, v in enumerate(values) if v != majority]
            raise CorruptionDetected(
                f"parameter checksums differ: group ranks {bad} disagree with the majority",
                source=values.index(majority),
                bad=bad,
            )

    def _l1(self) -> float:
        return float(sum(p.detach().double().abs().sum() for p in self.model.parameters()))

    def checksum(self) -> dict[str, Any]:
        digest = hashlib.sha1()
        for p in self.model.parameters():
            digest.update(p.detach().cpu().contiguous().numpy().tobytes())
        return {"digest": digest.hexdigest()[:16], "l1": self._l1()}

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])

    def dcp_state_dict(self) -> dict[str, Any]:
        # DCP's own view of module and optimizer: optimizer state keyed by parameter name
        # (not by position), as torch's DCP docs have it.
        model, optim = get_state_dict(self.model, self.opt)
        return {"model": model, "optim": optim}

    def load_dcp_state_dict(self, state: dict[str, Any]) -> None:
        set_state_dict(self.model, self.opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
