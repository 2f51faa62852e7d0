"""One TorchFT replica group (one process): the rank side of the ``torchft`` strategy.

The stack is TorchFT's own, as its ``train_ddp.py`` example runs it: a TCPStore for the
replica group, a reconfigurable ``ProcessGroupGloo``, a :class:`torchft.Manager` talking
to the lighthouse, TorchFT's ``DistributedDataParallel`` and ``OptimizerWrapper``, the
HTTP checkpoint transport for live healing. Each replica group has one rank (group rank
0 of 1), so "replica group r" is what the rest of ftbench calls rank r. (The sharded
transformer under hsdp has groups of several ranks: ``sharded.py``.)

The process group is torchft's own ``ProcessGroupGloo`` or, with torch >= 2.14, a torch
group that torch reconfigures in place (``recovery.torchft.process_group``,
:func:`native_group`); the replica records which one the Manager holds (``tf_pg``) and
the group's handle after each quorum change (``pg_handle`` of ``reconfigured``).

Three things are ftbench's, each only observing:

- :class:`StampingManager` stamps the first error reported to the manager (``detect``);
- :class:`TimedTransport` stamps the live checkpoint transfer (``restore_*``);
- :class:`PatchedDistributedDataParallel`, the 0.2.0 comm-hook workaround, used only
  where the installed torchft is known to kill survivors (docs/facts.md), or when the
  scenario forces it (:func:`ddp_class`).

**Batches and losses.** Every committed step ``s`` consumes the same global batch as
under every other strategy: ``DDPWorkload.batch(s, i, n)``, the ``i``-th of ``n`` equal
shares, where ``n`` is the number of participants of the step and ``i`` this replica's
participating rank. TorchFT's allreduce *averages* over the ``n`` participants, so each
replica scales its summed squared error by ``n / global_batch``: the average is then the
exact gradient of the global mean loss, whoever participates. A committed step is
therefore the same computation as in a fault-free run (up to float summation order),
and ``loss_delta`` against the fault-free torchft reference of the same seed shows
whether recovery lost or corrupted state, not how many replicas happened to be up. A
replica that is healing in a step does not participate (TorchFT zeroes its gradient);
it computes on share 0 and reports ``loss_share = 0``. ``loss_share`` is the unscaled
``sum / global_batch``, so the shares of one step sum to the global mean loss.
Knowing ``i`` and ``n`` before the forward pass means waiting for the step's quorum
there instead of in the first allreduce; the quorum still runs on TorchFT's thread.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torchft.ddp import DistributedDataParallel
from torchft.optim import OptimizerWrapper

from bench.procs.events import ADDRESS_ENV, EventWriter
from bench.procs.hygiene import redirect_output
from bench.procs.store import bound_store
from bench.rank.abortable import future_for
from bench.rank.entry import RankSpec, store_client
from bench.rank.loop import build_workload
from bench.strategies.torchft import group_size
from bench.strategies.torchft.lighthouse import LIGHTHOUSE_KEY
from bench.strategies.torchft.loop import train
from bench.strategies.torchft.observe import (
    make_manager,
    replica_log_path,
    start_barrier,
    torchft_group,
)
from bench.strategies.torchft.sharded import sharded_main
from bench.strategies.torchft.version import (
    NATIVE_STORE_PREFIX,
    ddp_workaround_needed,
    native_unsupported,
    observe_pg,
    pg_path,
    torchft_version,
)


def replica_main(spec: RankSpec, events: EventWriter) -> int:
    """Train until ``workload.steps`` steps are committed; returns the exit code."""
    if group_size(spec.workload) > 1:
        return sharded_main(spec, events)
    redirect_output(replica_log_path(spec.events_dir, spec.rank, os.getpid()))
    torch.set_num_threads(1)

    wl, params = spec.workload, spec.recovery.params
    td = datetime.timedelta
    store = store_client(spec)
    lighthouse = store.get(LIGHTHOUSE_KEY).decode()
    workload: Any = build_workload(spec, events)
    version = torchft_version()
    workaround = ddp_workaround_needed(version, params.ddp_workaround)

    # The replica group's own store (torchrun's agent hosts it in a real job); group rank 0
    # of the quorum's first member also serves the process-group rendezvous from it, to
    # the other replicas: on its host's address where they run on other hosts.
    address = os.environ.get(ADDRESS_ENV, "127.0.0.1")
    group_store = bound_store(address, timeout_s=spec.wait_s)
    requested = params.process_group
    path, reason = pg_path(requested, None if requested == "torchft" else native_unsupported(spec.backend))
    pg = native_group(spec, td(seconds=wl.pg_timeout_s)) if path == "native" else torchft_group(spec)
    manager = make_manager(
        spec,
        events,
        pg=pg,
        state=(workload.state_dict, workload.load_state_dict),
        rank=0,
        world_size=1,
        store=(address, group_store.port),
        lighthouse=lighthouse,
        replica_id=f"replica_{spec.rank}",
    )
    # What the Manager was handed, read off its own objects (not the knob).
    events.emit("tf_pg", requested=requested, reason=reason, **observe_pg(manager._pg))
    model = ddp_class(workaround)(manager, workload.model)
    optimizer = OptimizerWrapper(manager, workload.opt)
    events.emit(
        "ft_ready",
        torchft=version[1] if version else None,
        ddp_workaround=workaround,
        replica_id=f"replica_{spec.rank}",
        pg_timeout_s=wl.pg_timeout_s,
        backend=spec.backend,
    )
    if spec.role == "initial":
        start_barrier(store, len(spec.members), spec.wait_s)

    def compute(step: int, replica: int | None, n: int) -> tuple[Callable[[], float], dict[str, Any]]:
        x, y = workload.batch(step, replica or 0, max(n, 1))
        sq = ((model(x) - y) ** 2).sum()
        (sq * max(n, 1) / workload.global_batch).backward()
        return (lambda: float(sq.item()) / workload.global_batch), {"group_rank": -1 if replica is None else replica}

    try:
        return train(spec, events, manager, optimizer, workload, compute)
    finally:
        manager.shutdown(wait=False)


def native_group(spec: RankSpec, timeout: datetime.timedelta) -> dist.ProcessGroup:
    """A torch gloo group in the reconfigure regime, for torchft's Manager to reconfigure
    in place: ``init_process_group(..., enable_reconfigure=True)`` connects nothing; the
    Manager's first quorum is its first ``reconfigure``, with the handles of the quorum's
    members, which the lighthouse hands out.

    Native gloo groups meet on their own store, so every replica's must be the same one:
    the launcher's store (its own connection: the Manager's quorum thread waits on it),
    under :data:`NATIVE_STORE_PREFIX`. The initial rank (the replica's id) only makes the
    handles of live replicas unique; ranks come from the handles' order in each quorum.
    ``timeout`` bounds collectives (a reconfigure keeps it; the Manager's own timeout
    bounds the reconfigure itself)."""
    store = dist.PrefixStore(NATIVE_STORE_PREFIX, store_client(spec))
    init: Any = dist.init_process_group  # enable_reconfigure: torch >= 2.14 (not in older stubs)
    init(
        "gloo",
        store=store,
        rank=spec.rank,
        world_size=spec.workload.world_size,
        timeout=timeout,
        enable_reconfigure=True,
    )
    group = dist.group.WORLD
    assert isinstance(group, dist.ProcessGroup)
    return group


def ddp_class(workaround: bool) -> type:
    """TorchFT's DDP, or the same with the fixed comm hook where the installed release
    lets a peer's death kill the survivors (0.2.0: ``assert fut._fut`` in its hook)."""
    return PatchedDistributedDataParallel if workaround else DistributedDataParallel


class PatchedDistributedDataParallel(DistributedDataParallel):
    """The nightly's hook: a bucket whose allreduce failed is returned unchanged; the
    manager already holds the error, so ``should_commit`` discards the step."""

    @staticmethod
    def _comm_hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        work = state.allreduce(bucket.buffer())
        if not work.wait():
            return _completed(bucket.buffer())
        fut = work.get_future()
        inner = getattr(fut, "_fut", None)
        # After an error the manager hands out a _DummyWork whose future is a plain,
        # already-completed one: return it as it is.
        done: torch.futures.Future[torch.Tensor] = fut if inner is None else inner
        return done


# DDP checks a hook's annotations at run time; this module's are strings.
PatchedDistributedDataParallel._comm_hook.__annotations__ = {
    "state": object,
    "bucket": dist.GradBucket,
    "return": torch.futures.Future[torch.Tensor],
}


def _completed(tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    fut = future_for(tensor)
    fut.set_result(tensor)
    return fut
