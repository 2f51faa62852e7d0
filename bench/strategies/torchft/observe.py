"""What the torchft replicas share, ftbench's side only: where their logs go, the stamps
on TorchFT's Manager and transport, the start barrier. ``replica.py`` (one rank per
replica group) and ``sharded.py`` (hsdp: a sharded world per group) both use it.
"""

from __future__ import annotations

import datetime
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torchft
from torch.utils._pytree import tree_flatten
from torchft.checkpointing import HTTPTransport

from bench.procs.events import EventWriter
from bench.rank.entry import RankSpec


def replica_log_path(events_dir: str | Path, rank: int, pid: int) -> str:
    """Where a replica's stdout/stderr (TorchFT's Rust and Python logs) go."""
    return str(Path(events_dir) / f"replica{rank}-{pid}.log")


def pg_handle(pg: Any) -> str:
    """The group's reconfigure handle now: a native gloo group's names the quorum it was
    last reconfigured for (``gloo:<rank>:<quorum id>:...``); torchft's is JSON."""
    try:
        return str(pg.get_reconfigure_handle())[:200]
    except Exception as err:
        return f"none ({type(err).__name__})"


def first_line(err: BaseException | None) -> str:
    """The message of a manager error without the traceback TorchFT appends to it."""
    return "" if err is None else (str(err).splitlines() or [type(err).__name__])[0]


class StampingManager(torchft.Manager):
    """TorchFT's Manager, remembering when the first error of a step was reported (the
    loop resets :attr:`first_error` before each step)."""

    first_error: tuple[int, str] | None = None

    def report_error(self, e: Exception) -> None:
        if self.first_error is None:
            self.first_error = (time.monotonic_ns(), f"{type(e).__name__}: {first_line(e)}")
        super().report_error(e)


class TimedTransport(HTTPTransport):
    """TorchFT's HTTP checkpoint transport, timing the receiving side.

    Timed: ``recv_checkpoint`` on the healing replica, i.e. the HTTP GET of the peer's
    full state (model and optimizer, plus TorchFT's step counters) and its
    deserialisation into CPU tensors. It runs on TorchFT's quorum thread after the new
    quorum and process group are in place; applying the state to the model happens later,
    in ``should_commit``, and is not included. ``bytes`` is the tensor payload received
    (the sum of the tensors' ``nbytes``), not the HTTP framing around it.
    """

    def __init__(self, events: EventWriter, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.events = events

    def recv_checkpoint(self, src_rank: int, metadata: str, step: int, timeout: datetime.timedelta) -> Any:
        self.events.emit(
            "restore_start", how="peer", source=src_rank, step=step, thread=threading.current_thread().name
        )
        state = super().recv_checkpoint(src_rank, metadata, step, timeout)
        leaves, _ = tree_flatten(state)
        size = sum(t.nbytes for t in leaves if isinstance(t, torch.Tensor))
        self.events.emit("restore_end", how="peer", source=src_rank, step=step, bytes=size)
        return state


def start_barrier(store: Any, count: int, wait_s: float) -> None:
    """Initial replicas start their first quorum together, through the launcher's store.

    Every Manager is heartbeating before anyone asks for a quorum, so the first quorum
    holds all of them (with any join timeout) and the pre-fault world is complete and the
    same in every trial; a replacement skips this.
    """
    if store.add("torchft/ready", 1) == count:
        store.set("torchft/go", "1")
    store.wait(["torchft/go"], datetime.timedelta(seconds=wait_s))


def torchft_group(spec: RankSpec) -> Any:
    """torchft's own reconfigurable process group for the point's backend, with the
    workload's collective timeout."""
    pg_class = torchft.ProcessGroupNCCL if spec.backend == "nccl" else torchft.ProcessGroupGloo
    return pg_class(timeout=datetime.timedelta(seconds=spec.workload.pg_timeout_s))


def make_manager(
    spec: RankSpec,
    events: EventWriter,
    *,
    pg: Any,
    state: tuple[Any, Any],
    rank: int,
    world_size: int,
    store: tuple[str, int],
    lighthouse: str,
    replica_id: str,
) -> StampingManager:
    """TorchFT's Manager with the scenario's knobs (``recovery.torchft``) and the timed
    transport; ``state`` is (state_dict, load_state_dict) of what heals, ``store`` the
    replica group's store (address, port)."""
    params = spec.recovery.params
    td = datetime.timedelta
    return StampingManager(
        pg=pg,
        state_dict=state[0],
        load_state_dict=state[1],
        min_replica_size=params.min_replica_size,
        timeout=td(seconds=params.timeout_s),
        quorum_timeout=td(seconds=params.quorum_timeout_s),
        connect_timeout=td(seconds=params.connect_timeout_s),
        rank=rank,
        world_size=world_size,
        store_addr=store[0],
        store_port=store[1],
        lighthouse_addr=lighthouse,
        replica_id=replica_id,
        checkpoint_transport=TimedTransport(events, timeout=td(seconds=params.timeout_s), num_chunks=0),
        init_sync=params.init_sync,
    )
