"""ray-train's rank side: the training function Ray runs on each worker, and its policy.

:func:`train_fn` is what a user hands ``TorchTrainer``: Ray calls it in a thread of each
worker actor, after ``TorchConfig`` has formed the gloo group. It runs ftbench's shared
training loop (the same workloads, steps and figures as every other stack) under
:class:`RayTrainPolicy`, which uses the group Ray formed, saves through
``ray.train.report(..., checkpoint=...)`` and resumes from ``ray.train.get_checkpoint()``.
A failed step's error is raised out of the training function, as from a user's: Ray's
controller learns it at its next poll.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import ray.train
import torch

from bench.procs.events import EventWriter
from bench.rank.comm import CollectiveError, StockCollectives
from bench.rank.entry import EXIT_CRASHED, EXIT_FAILED, EndedByError, spec_from_json
from bench.rank.policy import RAISE, Position, Raise, RankPolicy, World
from bench.rank.workload import Workload
from bench.strategies.ray_train import RayTrainParams
from bench.strategies.ray_train.observe import GEN_ENV

STATE_FILE = "state.pt"


def train_fn(config: dict[str, Any]) -> None:
    """One worker of the group: ftbench's loop in Ray's worker, events on the way."""
    from bench.rank.loop import train

    context = ray.train.get_context()
    rank = context.get_world_rank()
    hosts: dict[str, str] = config["hosts"]
    host = hosts.get(ray.util.get_node_ip_address(), "")  # type: ignore[no-untyped-call]
    spec = replace(spec_from_json(config["spec"], file="ray-train spec"), rank=rank)
    pid = os.getpid()
    events = EventWriter(
        Path(spec.events_dir) / f"rank{rank}-{pid}.jsonl",
        src="rank",
        rank=rank,
        pid=pid,
        **({"host": host} if host else {}),
    )
    events.emit("proc_start", role="ray_worker", gen=int(os.environ.get(GEN_ENV, "0")))
    events.emit("import_done")  # torch and ray were imported by Ray's worker before the function ran
    code, error = EXIT_CRASHED, None
    try:
        code = train(spec, events)
    except EndedByError as end:
        code, error = EXIT_FAILED, end.error
    except BaseException as err:
        events.emit("crash", error=f"{type(err).__name__}: {err}"[:500])
        error = err
    finally:
        events.emit("proc_exit", exitcode=code)
        events.close()
    if error is not None:
        raise error  # as from a user's training function: Ray's controller handles it


class RayTrainPolicy(RankPolicy):
    """The world is Ray's worker group; the state comes from Ray's checkpoint."""

    def start(self, workload: Workload) -> Position:
        spec = self.spec
        context = ray.train.get_context()
        rank, size = context.get_world_rank(), context.get_world_size()
        gen = int(os.environ.get(GEN_ENV, "0"))
        # TorchConfig formed the group before the function ran; recorded here.
        self.events.emit(
            "pg_ready", gen=gen, world_size=size, backend=spec.backend, pg_timeout_s=spec.workload.pg_timeout_s
        )
        if gen > 0:
            self.events.emit("reconfigured", gen=gen, world_size=size)
        world = World(gen=gen, members=tuple(range(size)), me=rank)
        comm = StockCollectives(group_rank=rank, group_size=size, hooks=self.hooks, interpose=spec.interpose)
        committed = self._restore(workload)
        workload.attach(comm)
        return Position(world=world, comm=comm, step=committed + 1, committed=committed)

    def _restore(self, workload: Workload) -> int:
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            return 0
        self.events.emit("restore_start", how="ray.train.get_checkpoint")
        with checkpoint.as_directory() as directory:
            path = Path(directory) / STATE_FILE
            saved = torch.load(path, weights_only=True)
            size = path.stat().st_size
        workload.load_state_dict(saved["state"])
        step = int(saved["step"])
        self.events.emit("restore_end", how="ray.train.get_checkpoint", bytes=size, step=step)
        return step

    def on_failure(self, pos: Position, err: CollectiveError, workload: Workload) -> Raise:
        return RAISE

    def after_step(self, pos: Position, workload: Workload) -> Position | int:
        params: RayTrainParams = self.spec.recovery.params
        if pos.committed % params.checkpoint_every == 0:
            self._report(pos, workload)
        return super().after_step(pos, workload)

    def _report(self, pos: Position, workload: Workload) -> None:
        """Every worker reports (Ray waits for all of them); rank 0 hands Ray the state,
        which Ray persists into the run's storage before ``report`` returns."""
        start = time.perf_counter()
        metrics = {"step": pos.committed}
        if pos.world.group_rank != 0:
            ray.train.report(metrics)
            self._saved(pos, start, 0)
            return
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / STATE_FILE
            torch.save({"step": pos.committed, "state": workload.state_dict()}, path)
            size = path.stat().st_size
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(directory))
        self._saved(pos, start, size)

    def _saved(self, pos: Position, start: float, size: int) -> None:
        blocked = time.perf_counter() - start
        self.events.emit(
            "checkpoint",
            design="ray.train.report",
            gen=pos.world.gen,
            step=pos.committed,
            blocked_s=blocked,
            save_s=blocked,
            bytes=size,
        )
