"""The transformer workload inside a rank: DDP, FSDP2 or HSDP over the strategy's group.

Determinism whatever the world: the initial weights come from the seed alone, batch
``b`` of the token stream from the seed and ``b`` alone, and the global batch stays the
one of the launch world when the world shrinks. Each rank scales its summed token loss
by the *global* token count (times the group size where the reduction averages: DDP's
stock reducer and FSDP2's reduce-scatter do, reinit's abortable layer sums), so the
gradient is the exact global mean in any world and a recovered run follows the
fault-free reference to float rounding.

The data position is state: ``batch`` (the next global batch of the stream) is saved,
sent and restored with the weights, and every step reports the batch it read, so that
a stack that restores weights but not the stream position shows up as tokens skipped or
repeated (``tokens_skipped``, ``tokens_repeated``), not as an unexplained loss delta.
"""

from __future__ import annotations

import copy
import hashlib
import math
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from bench.rank.comm import Collectives, site
from bench.rank.workload import Workload, move
from bench.workloads.transformer import TransformerParams
from bench.workloads.transformer.model import DecoderLM, build, tokens


class TransformerWorkload(Workload):
    params: TransformerParams

    def __init__(self, params: TransformerParams, *, seed: int, world_size: int, device: torch.device) -> None:
        super().__init__(params, seed=seed, world_size=world_size, device=device)
        self.model: DecoderLM = build(params, seed)
        self.global_batch = world_size * params.batch_per_rank
        self.tokens_per_step = self.global_batch * params.seq_len
        self.batch = 0
        """The next global batch of the token stream (the data position)."""
        self.opt: torch.optim.Optimizer | None = None
        self.ddp: DistributedDataParallel | None = None
        self._retired: list[Any] = []
        self.comm: Collectives | None = None
        if params.parallelism == "ddp":
            self.opt = self._optimizer()

    def upload(self) -> int:
        return move(self.model, self.opt, self.device)

    @property
    def sharded(self) -> bool:
        return self.params.parallelism != "ddp"

    def _optimizer(self) -> torch.optim.Optimizer:
        # foreach=False: the per-parameter loop handles DTensor shards and plain tensors alike.
        return torch.optim.AdamW(self.model.parameters(), lr=self.params.lr, weight_decay=0.0, foreach=False)

    def attach(self, comm: Collectives) -> None:
        if self.sharded:
            if self.comm is not None:
                # validate refuses every stack that re-forms a world under a sharded model
                # (bench.workloads.transformer.check): the mesh is bound to the first group.
                raise RuntimeError("a sharded transformer cannot move to a new process group in place")
            self.comm = comm
            self._ensure_sharded()
            return
        self.comm = comm
        if self.ddp is not None:
            # As the ddp workload: the old wrapper holds the old gloo group, whose destructor
            # may block on a dead peer; keep it, and train fresh copies it does not know.
            self._retired.append(self.ddp)
            state = self.state_dict()
            self.model = copy.deepcopy(self.model)
            self.opt = self._optimizer()
            self.opt.load_state_dict(state["opt"])
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.ddp = DistributedDataParallel(self.model, device_ids=ids)
        comm.attach_ddp(self.ddp)

    def _ensure_sharded(self) -> None:
        """Shard on first need: a restart restores its checkpoint into the sharded model
        before it attaches, once the process group exists."""
        if self.sharded and self.opt is None:
            self._shard()
            self.opt = self._optimizer()

    def _shard(self) -> None:
        """The mesh over the default group: replicate x shard under hsdp, shard alone
        under fsdp."""
        from torch.distributed.device_mesh import init_device_mesh

        kind = self.device.type
        world = dist.get_world_size()
        if self.params.parallelism == "hsdp":
            # A world that came back smaller (a restart into fewer ranks) keeps as many
            # replica groups as still divide it; the checkpoint is resharded to that mesh.
            r = math.gcd(self.params.replicas, world)
            mesh = init_device_mesh(kind, (r, world // r), mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh(kind, (world,), mesh_dim_names=("shard",))
        self._fully_shard(mesh)

    def _fully_shard(self, mesh: Any) -> None:
        """FSDP2 per block, then at the root (embedding, final norm and the head, which
        stays tied to the embedding because both live in the root's group)."""
        from torch.distributed.fsdp import fully_shard

        for block in self.model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(self.model, mesh=mesh)

    def shard_within(self, mesh: Any) -> None:
        """Shard over a 1-D ``mesh`` the caller built (a torchft replica group's own ranks:
        the replicate dimension is torchft's, across groups, outside any mesh), and make
        the optimizer over the shards."""
        if self.opt is not None:
            raise RuntimeError("the transformer is already sharded")
        self._fully_shard(mesh)
        self.opt = self._optimizer()

    def shard(self, batch: int, group_rank: int, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's share of global batch ``batch``: inputs and next-token targets."""
        seqs = tokens(self.params, self.seed, batch, self.global_batch)
        lo = self.global_batch * group_rank // group_size
        hi = self.global_batch * (group_rank + 1) // group_size
        part = seqs[lo:hi].to(self.device)
        return part[:, :-1], part[:, 1:]

    def step(self, step: int) -> dict[str, Any]:
        assert self.comm is not None and self.opt is not None
        read = self.batch
        x, y = self.shard(read, self.comm.group_rank, self.comm.group_size)
        net = self.ddp if self.ddp is not None else self.model
        self.opt.zero_grad(set_to_none=False)
        with site("forward"):  # FSDP all-gathers each block's parameters here
            logits: torch.Tensor = net(x)
        summed = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum")
        loss_share: torch.Tensor = summed / self.tokens_per_step
        averages = self.sharded or self.comm.averages
        with site("backward"):
            torch.autograd.backward(loss_share * (self.comm.group_size if averages else 1))
        self.opt.step()
        self.batch = read + 1
        return {"loss_share": float(loss_share.item()), "batch": read, "tokens": self.tokens_per_step}

    def _full(self) -> list[torch.Tensor]:
        """Every parameter whole (a collective under FSDP: every rank calls it together)."""
        out = []
        for p in self.model.parameters():
            t = p.detach()
            full = getattr(t, "full_tensor", None)
            out.append(full() if full is not None else t)
        return out

    def checksum(self) -> dict[str, Any]:
        digest = hashlib.sha1()
        l1 = 0.0
        for t in self._full():
            digest.update(t.cpu().contiguous().numpy().tobytes())
            l1 += float(t.double().abs().sum())
        return {"digest": digest.hexdigest()[:16], "l1": l1}

    def state_dict(self) -> dict[str, Any]:
        """Weights, AdamW moments and the data position (sharded: this rank's shards)."""
        if self.sharded:
            return self.dcp_state_dict()
        assert self.opt is not None
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "data": {"batch": self.batch}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.sharded:
            self.load_dcp_state_dict(state)
            return
        assert self.opt is not None
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.batch = int(state["data"]["batch"])

    def dcp_state_dict(self) -> dict[str, Any]:
        """What ``torch.distributed.checkpoint`` saves and fills in place: DCP's own view
        of module and optimizer (under FSDP each rank's shards as DTensors, so N ranks
        write N parts and M ranks can read them back resharded), and the data position
        as a tensor (the same on every rank, so DCP keeps one copy)."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        self._ensure_sharded()
        assert self.opt is not None
        model, optim = get_state_dict(self.model, self.opt)
        return {"model": model, "optim": optim, "data": {"batch": torch.tensor(self.batch, dtype=torch.int64)}}

    def local_state_dict(self) -> dict[str, Any]:
        """This rank's shards as plain tensors, for a transport that ships one rank's
        state to the rank holding the same shards elsewhere (torchft's live healing from a
        replica group with the same layout): no device mesh travels with them."""
        from torch.distributed.tensor import DTensor
        from torch.utils._pytree import tree_map_only

        local: dict[str, Any] = tree_map_only(DTensor, lambda t: t.to_local(), self.dcp_state_dict())
        return local

    def load_local_state_dict(self, state: dict[str, Any]) -> None:
        """The inverse of :meth:`local_state_dict` on a rank whose shards have the same
        layout: each tensor of a parameter (its weights, its AdamW moments) becomes a
        DTensor on this rank's mesh with that parameter's placements."""
        from torch.distributed.tensor import DTensor

        self._ensure_sharded()
        params: dict[str, Any] = dict(self.model.named_parameters(remove_duplicate=False))

        def lift(fqn: str, t: Any) -> Any:
            p = params.get(fqn)
            if not isinstance(p, DTensor) or not isinstance(t, torch.Tensor) or t.dim() == 0:
                return t  # buffers, AdamW's step counters
            return DTensor.from_local(t, p.device_mesh, p.placements, run_check=False, shape=p.shape, stride=p.stride())

        optim = state["optim"]
        self.load_dcp_state_dict(
            {
                "model": {k: lift(k, v) for k, v in state["model"].items()},
                "optim": {
                    **optim,
                    "state": {k: {n: lift(k, v) for n, v in s.items()} for k, s in optim["state"].items()},
                },
                "data": state["data"],
            }
        )

    def load_dcp_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        self._ensure_sharded()
        assert self.opt is not None
        set_state_dict(self.model, self.opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self.batch = int(state["data"]["batch"])
