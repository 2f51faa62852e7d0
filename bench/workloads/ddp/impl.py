"""A small MLP trained with DistributedDataParallel on synthetic regression data.

Data and initial weights come from the seed and the step number only. The global batch
(``world_size x batch_per_rank`` at launch) stays the same after the world shrinks: the
survivors split it among themselves. Each rank scales its loss by the *global* batch
(times the group size where DDP's stock reducer averages), so the gradient is the exact
global mean in any world and a recovered run follows the fault-free reference up to
float rounding.

``state_mb`` adds a wide branch beside the MLP (:func:`bench.workloads.ddp.state_width`)
whose output is added to the MLP's. What it costs per step, per rank: about
``6 x batch_share x P`` floating-point operations for its P parameters (forward, and the
weight and input gradients), an all-reduce of 4P bytes of gradient, and an SGD update
reading and writing 16P bytes (value, gradient, momentum); at 1 GB of state that is
125 M parameters, a 500 MB all-reduce and about 24 GFLOP at 32 samples.
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
from bench.rank.workload import Workload, move
from bench.workloads.ddp import DDPParams, state_width


class WideBranch(torch.nn.Module):
    """The state-sizing branch: hidden -> W -> 1, its output scaled by sqrt(hidden / W).

    Without the scale, the head's gradient step on the output grows with W (the sum of W
    squared activations), and a learning rate that suits the MLP makes a wide branch
    diverge at once; with it, the branch learns at the pace of a ``hidden``-wide layer
    whatever its size, so the loss curve stays finite at every state size."""

    def __init__(self, in_features: int, hidden: int, width: int) -> None:
        super().__init__()
        self.inner = torch.nn.Sequential(
            torch.nn.Linear(in_features, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, 1, bias=False),
        )
        self.scale = (hidden / width) ** 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner(x)
        return out.mul(self.scale)


class StateSizedMLP(torch.nn.Module):
    """The MLP plus the branch that gives the model ``state_mb`` of state."""

    def __init__(self, mlp: torch.nn.Sequential, branch: WideBranch) -> None:
        super().__init__()
        self.mlp = mlp
        self.branch = branch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.mlp(x) + self.branch(x)
        return out


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
        self.model: torch.nn.Module = torch.nn.Sequential(*layers)
        with torch.no_grad():
            for p in self.model.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / max(1, p.shape[-1])) ** 0.5)
        self.teacher = torch.randn(params.in_features, 1, generator=gen)
        wide = state_width(params)
        if wide:
            # Drawn after the teacher, so the task is the same at every state size; in
            # place, so a large branch is not held twice while it is drawn.
            branch = WideBranch(params.in_features, params.hidden, wide)
            with torch.no_grad():
                for p in branch.parameters():
                    p.normal_(0.0, (1.0 / max(1, p.shape[-1])) ** 0.5, generator=gen)
            self.model = StateSizedMLP(self.model, branch)
        self.global_batch = world_size * params.batch_per_rank
        self.opt = self._optimizer()
        self.ddp: DistributedDataParallel | None = None
        self._retired: list[DistributedDataParallel] = []
        self.comm: Collectives | None = None

    def upload(self) -> int:
        return move(self.model, self.opt, self.device)

    @property
    def sized(self) -> bool:
        """Whether ``state_mb`` added the wide branch."""
        return isinstance(self.model, StateSizedMLP)

    def attach(self, comm: Collectives) -> None:
        self.comm = comm
        if self.ddp is not None:
            # Freeing the old wrapper would run the old gloo group's destructor, which joins
            # a worker thread that may still wait on a dead peer (until its timeout, or
            # forever). So the old wrapper is kept, and training moves to fresh copies of
            # the parameters and optimizer that its hooks do not know about.
            self._retired.append(self.ddp)
            state = self.state_dict()
            old = self.model
            self.model = copy.deepcopy(self.model)
            self.opt = self._optimizer()
            self.opt.load_state_dict(state["opt"])
            del state
            if self.sized:
                # A sized state would otherwise be held twice more by the retired wrapper
                # (its parameters and momentum); its gradient buckets stay, its worker
                # thread may still be writing them.
                with torch.no_grad():
                    for p in old.parameters():
                        p.data = torch.empty(0, dtype=p.dtype, device=p.device)
        ids = [self.device.index] if self.device.type == "cuda" else None
        # With a sized state, gradients are views of DDP's buckets: one copy of them, not two.
        self.ddp = DistributedDataParallel(self.model, device_ids=ids, gradient_as_bucket_view=self.sized)
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
