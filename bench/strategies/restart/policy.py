"""restart's rank side: the world comes from torchrun, state from the last checkpoint.

Rank, size and rendezvous come from torchrun's environment (``env://``); the generation
is ``TORCHELASTIC_RESTART_COUNT``. A failure ends the worker (exit 1): the agent then
tears the group down and starts a new one, which resumes from the last finished
checkpoint of the design the ``checkpoint`` knob names (an asynchronous save still in
flight dies with its worker).
"""

from __future__ import annotations

import os

from bench.rank.checkpoint.base import Checkpointer, between_steps, open_checkpointer, where
from bench.rank.comm import CollectiveError, StockCollectives
from bench.rank.entry import EXIT_FAILED
from bench.rank.policy import Position, RankPolicy, World
from bench.rank.workload import Workload
from bench.strategies.restart import RestartParams


class RestartPolicy(RankPolicy):
    checkpointer: Checkpointer

    def start(self, workload: Workload) -> Position:
        spec = self.spec
        params: RestartParams = spec.recovery.params
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        gen = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.init_group(gen=gen, rank=rank, size=size, init_method="env://")
        if gen > 0:
            self.events.emit("reconfigured", gen=gen, world_size=size)
        world = World(gen=gen, members=tuple(range(size)), me=rank)
        comm = StockCollectives(group_rank=rank, group_size=size, hooks=self.hooks, interpose=spec.interpose)
        self.checkpointer = open_checkpointer(params.checkpoint, where(spec, world), workload, self.events)
        committed = self.checkpointer.restore()
        workload.attach(comm)
        return Position(world=world, comm=comm, step=committed + 1, committed=committed)

    def on_failure(self, pos: Position, err: CollectiveError, workload: Workload) -> int:
        return EXIT_FAILED

    def after_step(self, pos: Position, workload: Workload) -> Position | int:
        params: RestartParams = self.spec.recovery.params
        err = between_steps(self.checkpointer, pos, params.checkpoint_every, self.events)
        if err is not None:
            return self.on_failure(pos, err, workload)
        return super().after_step(pos, workload)

    def finish(self, pos: Position) -> None:
        self.checkpointer.finish()
