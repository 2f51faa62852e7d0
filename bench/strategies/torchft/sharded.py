"""A rank of a TorchFT replica group under HSDP: the group shards, torchft replicates.

This is how torchft trains a sharded model (its ``fsdp_test`` and torchtitan's
integration do the same): each replica group is a torch.distributed world of its own
(``world_size / replicas`` ranks, the group's own rendezvous), FSDP2 shards the model
over a 1-D mesh of that world, and each FSDP module's all-reduce hook averages the
reduce-scattered gradient shard across the replica groups with ``Manager.allreduce``,
on torchft's reconfigurable process group (one per shard index: group rank ``j`` of
every replica group meet in it). Group rank 0 hosts the group's store and talks to the
lighthouse; every rank holds a Manager (``rank = j``, ``world_size`` = the group's).

A replacement group heals from a live replica over TorchFT's HTTP transport: group
rank ``j`` fetches the shards group rank ``j`` of the source holds (weights, AdamW
moments and the data position, as plain tensors: the layout is the same on both sides,
:meth:`TransformerWorkload.local_state_dict`), timed by :class:`TimedTransport`.

The harness acts as torchrun's agent of each group (``job.py``): when one rank of a
group dies it stops the others and starts the whole group again. A rank whose own
group's collective fails first (its peer died) records the detection and exits with a failure,
as a worker whose collective raised does.

**Batches and losses.** Step ``s`` reads global batch ``workload.batch`` (the data
position, carried in the healed state), split in ``n x group size`` equal shares over
the participating ranks, ``n`` the participating groups. FSDP2's reduce-scatter
averages over the group and torchft's allreduce over the ``n`` groups, so each rank
scales its token loss (summed over its share, over the global token count) by
``n x group size``: the gradient is the exact global mean, whoever participates, and a
committed step is the same computation as in a fault-free run. A healing group computes
on share 0, reports ``loss_share = 0`` and no batch (TorchFT zeroes its contribution).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torchft.optim import OptimizerWrapper

from bench.procs.events import ADDRESS_ENV, EventWriter
from bench.procs.hygiene import redirect_output
from bench.procs.store import bound_store
from bench.rank.entry import RankSpec, store_client
from bench.rank.loop import build_workload
from bench.strategies.torchft import group_key, group_size
from bench.strategies.torchft.lighthouse import LIGHTHOUSE_KEY
from bench.strategies.torchft.loop import GroupLost, train
from bench.strategies.torchft.observe import (
    first_line,
    make_manager,
    replica_log_path,
    start_barrier,
    torchft_group,
)
from bench.strategies.torchft.version import observe_pg, torchft_version


def sharded_main(spec: RankSpec, events: EventWriter) -> int:
    """Train until ``workload.steps`` steps are committed; returns the exit code."""
    redirect_output(replica_log_path(spec.events_dir, spec.rank, os.getpid()))
    torch.set_num_threads(1)

    wl, params = spec.workload, spec.recovery.params
    size = group_size(wl)
    group, group_rank = divmod(spec.rank, size)
    td = datetime.timedelta
    store = store_client(spec)
    lighthouse = store.get(LIGHTHOUSE_KEY).decode()
    prefix = f"torchft/group{group}/{store.get(group_key(group)).decode()}"

    # The group's own store (torchrun's agent hosts it in a real job; here group rank 0),
    # for its Manager and, through the launcher's, the group's own world.
    address = os.environ.get(ADDRESS_ENV, "127.0.0.1")
    group_store = None
    if group_rank == 0:
        group_store = bound_store(address, timeout_s=spec.wait_s)
        store.set(f"{prefix}/store", str(group_store.port))
    store_port = int(store.get(f"{prefix}/store").decode())
    dist.init_process_group(
        "gloo",
        store=dist.PrefixStore(f"{prefix}/world", store),
        rank=group_rank,
        world_size=size,
        timeout=td(seconds=wl.pg_timeout_s),
    )
    workload: Any = build_workload(spec, events)
    workload.shard_within(init_device_mesh(workload.device.type, (size,), mesh_dim_names=("shard",)))

    manager = make_manager(
        spec,
        events,
        pg=torchft_group(spec),
        state=(workload.local_state_dict, workload.load_local_state_dict),
        rank=group_rank,
        world_size=size,
        store=(address, store_port),
        lighthouse=lighthouse,
        replica_id=f"replica_{group}",
    )
    events.emit("tf_pg", requested=params.process_group, reason="hsdp", **observe_pg(manager._pg))

    def across_replicas(reduced: torch.Tensor) -> None:
        manager.allreduce(reduced).wait()  # averages over the participating groups

    for module in [*workload.model.blocks, workload.model]:
        module.set_all_reduce_hook(across_replicas)
    optimizer = OptimizerWrapper(manager, workload.opt)
    version = torchft_version()
    events.emit(
        "ft_ready",
        torchft=version[1] if version else None,
        ddp_workaround=False,
        replica_id=f"replica_{group}",
        group_rank=group_rank,
        group_size=size,
        pg_timeout_s=wl.pg_timeout_s,
        backend=spec.backend,
    )
    if spec.role == "initial":
        start_barrier(store, len(spec.members), spec.wait_s)

    def compute(step: int, replica: int | None, n: int) -> tuple[Callable[[], float], dict[str, Any]]:
        read, ranks = workload.batch, max(n, 1) * size
        index = (replica or 0) * size + group_rank
        x, y = workload.shard(read, index, ranks)
        try:
            logits = workload.model(x)  # FSDP all-gathers each block within the group
            summed = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum")
            share = summed / workload.tokens_per_step
            (share * ranks).backward()  # reduce-scatter in the group, then torchft's allreduce
        except RuntimeError as err:  # the group's own collective: a peer of this group died
            raise GroupLost(f"{type(err).__name__}: {first_line(err)}") from err
        fields: dict[str, Any] = {"group_rank": -1 if replica is None else index}
        if replica is not None:
            fields.update(batch=read, tokens=workload.tokens_per_step)
        return (lambda: float(share.item())), fields

    def advance() -> None:
        workload.batch += 1  # after a heal: the source's position, plus this step

    try:
        return train(spec, events, manager, optimizer, workload, compute, group_size=size, on_commit=advance)
    finally:
        manager.shutdown(wait=False)
        del group_store
