"""nvrx-inprocess's rank side: the shared training loop, wrapped in NVRx's ``inprocess.Wrapper``.

:func:`rank_main` is what each rank process runs. It sets the environment NVRx reads
(``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``), builds the Wrapper from the scenario's knobs
with NVRx's own components behind observers (:mod:`.observe`), and calls the wrapped
training function: ftbench's loop (:func:`bench.rank.loop.train`) with the policy below.
NVRx calls it again, in the same process, after every fault it recovers from.

Each call of the training function is one NVRx restart iteration, and ftbench's
generation: the policy forms a process group with the rank and world size NVRx assigned
(on the launcher's store, under the iteration's prefix, as NVRx's examples do), learns
which launch rank holds each group rank from NVRx's own store records, and resumes from
the last checkpoint. A failed collective is re-raised, so that NVRx sees the exception
(its restart is then NVRx's business); the training state is rebuilt in every iteration,
as in NVRx's basic example.
"""

from __future__ import annotations

import datetime
import importlib
import logging
import os
from pathlib import Path
from typing import Any

import torch.distributed as dist
from nvidia_resiliency_ext import inprocess
from nvidia_resiliency_ext.inprocess import health_check, initialize, rank_assignment
from nvidia_resiliency_ext.inprocess.abort import AbortTorchDistributed

from bench.jobs.nvrx import nvrx_version
from bench.procs.events import EventWriter
from bench.rank.checkpoint.base import Checkpointer, between_steps, open_checkpointer, where
from bench.rank.comm import CollectiveError, StockCollectives
from bench.rank.entry import EXIT_LEFT, RankSpec, store_client
from bench.rank.loop import train
from bench.rank.policy import Position, RankPolicy, World
from bench.rank.workload import Workload
from bench.strategies.nvrx_inprocess import STORE_PORT_KEY, NVRxInprocessParams
from bench.strategies.nvrx_inprocess.observe import (
    ObservedAbort,
    ObservedFinalize,
    ObservedHealthCheck,
    ObservedInitialize,
    ObservedRankAssignment,
    StoreEvents,
    observe_store,
)

_CALL: list[Any] = []
"""The CallWrapper of the running iteration (NVRx injects it into the wrapped function;
the policy, constructed by the loop, reads it here)."""


def rank_main(spec: RankSpec, events: EventWriter) -> int:
    """Run the wrapped training function until NVRx returns; the rank's exit code."""
    # NVRx logs through `logging` (the Wrapper warns and goes silent without a handler);
    # stderr is the rank's log file.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    params: NVRxInprocessParams = spec.recovery.params
    port = int(store_client(spec).get(STORE_PORT_KEY).decode())
    os.environ.update(RANK=str(spec.rank), WORLD_SIZE=str(len(spec.members)), MASTER_ADDR=spec.store_host)
    # The first optimizer step imports torch._dynamo: seconds in which the main thread
    # stamps no progress (docs/facts.md). Done here, before the Wrapper, as NVRx's
    # optimal example builds what lasts before its wrapped function: a RankShouldRestart
    # that NVRx raises inside an import leaves a half-initialised module behind, and
    # every later iteration then fails on it (measured: docs/facts.md).
    importlib.import_module("torch._dynamo")
    events_dir = Path(spec.events_dir).resolve()  # NVRx's monitor process changes directory to /
    observe_store(StoreEvents(events, events_dir, spec.rank))
    wrapper = build_wrapper(params, events.emit, host=spec.store_host, port=port, logfile=events_dir)
    events.emit("nvrx_ready", nvrx=nvrx_version(), store_port=port)
    result = wrapper(_attempt)(spec, events)
    return EXIT_LEFT if result is None else int(result)  # NVRx returns None to inactive ranks


def _attempt(spec: RankSpec, events: EventWriter, call_wrapper: Any = None) -> int:
    """One NVRx restart iteration: ftbench's loop, from the last checkpoint."""
    _CALL[:] = [call_wrapper]
    return train(spec, events)


# NVRx finds the parameter to fill with its CallWrapper by its annotation (a class, not
# the string that `from __future__ import annotations` leaves); the others need none.
_attempt.__annotations__ = {"call_wrapper": inprocess.CallWrapper}


def build_wrapper(params: NVRxInprocessParams, emit: Any, *, host: str, port: int, logfile: Path) -> Any:
    """NVRx's Wrapper for these knobs; its components NVRx's own, each observed."""
    s = lambda v: datetime.timedelta(seconds=v)
    assignment = {"shift": rank_assignment.ShiftRanks, "fill_gaps": rank_assignment.FillGaps}[params.rank_assignment]
    checks = {
        "none": None,
        "cuda": health_check.CudaHealthCheck(),
        "fault_counter": health_check.FaultCounter(params.max_rank_faults or None),
    }
    retry = initialize.RetryController(
        max_iterations=params.max_iterations or None, min_world_size=params.min_world_size
    )
    return inprocess.Wrapper(
        store_kwargs={"host_name": host, "port": port},
        initialize=ObservedInitialize(retry, emit),
        abort=ObservedAbort(AbortTorchDistributed(), emit),
        finalize=ObservedFinalize(None, emit),
        health_check=ObservedHealthCheck(checks[params.health_check], emit),
        rank_assignment=ObservedRankAssignment(
            inprocess.Compose(rank_assignment.ActivateAllRanks(), assignment()), emit
        ),
        monitor_thread_interval=s(params.monitor_thread_interval_s),
        monitor_process_interval=s(params.monitor_process_interval_s),
        heartbeat_interval=s(params.heartbeat_interval_s),
        progress_watchdog_interval=s(params.progress_watchdog_interval_s),
        soft_timeout=s(params.soft_timeout_s),
        hard_timeout=s(params.hard_timeout_s),
        heartbeat_timeout=s(params.heartbeat_timeout_s),
        barrier_timeout=s(params.barrier_timeout_s),
        completion_timeout=s(params.completion_timeout_s),
        last_call_wait=s(params.last_call_wait_s),
        termination_grace_time=s(params.termination_grace_time_s),
        monitor_process_logfile=str(logfile / "nvrx-monitor{rank}.log"),
    )


class NVRxInprocess(RankPolicy):
    """The world of one NVRx iteration; a failure goes back to NVRx."""

    checkpointer: Checkpointer

    def start(self, workload: Workload) -> Position:
        spec = self.spec
        call = _CALL[0]
        gen = int(call.iteration)
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])  # NVRx's assignment
        # The application's own store (the launcher's), under the iteration's prefix as in
        # NVRx's examples; NVRx's store is left to NVRx: its monitor thread holds the
        # client's connection in a blocking wait for up to monitor_thread_interval_s.
        store = dist.PrefixStore(f"nvrx{gen}", store_client(spec))
        store.set(f"launch_rank/{rank}", str(spec.rank))
        self.init_group(gen=gen, rank=rank, size=size, store=store)
        if gen > 0:
            self.events.emit("reconfigured", gen=gen, world_size=size)
        # Every member set its key before the process group's rendezvous, which they all passed.
        members = store.multi_get([f"launch_rank/{r}" for r in range(size)])
        world = World(gen=gen, members=tuple(int(m) for m in members), me=spec.rank)
        comm = StockCollectives(group_rank=rank, group_size=size, hooks=self.hooks, interpose=spec.interpose)
        params: NVRxInprocessParams = spec.recovery.params
        # A checkpointer per iteration: its world (and any group of its own) is this one's.
        self.checkpointer = open_checkpointer(params.checkpoint, where(spec, world), workload, self.events)
        committed = self.checkpointer.restore()
        workload.attach(comm)
        return Position(world=world, comm=comm, step=committed + 1, committed=committed)

    def on_failure(self, pos: Position, err: CollectiveError, workload: Workload) -> int:
        raise err  # NVRx's Wrapper handles it: record, abort everyone, restart

    def after_step(self, pos: Position, workload: Workload) -> Position | int:
        params: NVRxInprocessParams = self.spec.recovery.params
        with _CALL[0].atomic():  # NVRx's guard: no restart in the middle of a save
            err = between_steps(self.checkpointer, pos, params.checkpoint_every, self.events)
        if err is not None:
            return self.on_failure(pos, err, workload)
        return super().after_step(pos, workload)

    def finish(self, pos: Position) -> None:
        with _CALL[0].atomic():
            self.checkpointer.finish()
