"""restart's rank side: the world comes from torchrun, state from the last checkpoint.

Rank, size and rendezvous come from torchrun's environment (``env://``); the generation
is ``TORCHELASTIC_RESTART_COUNT``. A failure ends the worker (exit 1): the agent then
tears the group down and starts a new one, which resumes from rank 0's checkpoint.
"""

from __future__ import annotations

import os

from bench.rank.comm import CollectiveError, StockCollectives
from bench.rank.entry import EXIT_FAILED
from bench.rank.policy import Position, RankPolicy, World
from bench.rank.state import restore_checkpoint, save_checkpoint
from bench.rank.workload import Workload
from bench.strategies.restart import RestartParams


class RestartPolicy(RankPolicy):
    def start(self, workload: Workload) -> Position:
        spec = self.spec
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        gen = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.init_group(gen=gen, rank=rank, size=size, init_method="env://")
        if gen > 0:
            self.events.emit("reconfigured", gen=gen, world_size=size)
        world = World(gen=gen, members=tuple(range(size)), me=rank)
        comm = StockCollectives(group_rank=rank, group_size=size, hooks=self.hooks, interpose=spec.interpose)
        committed = restore_checkpoint(spec.checkpoint_dir, workload, self.events)
        workload.attach(comm)
        return Position(world=world, comm=comm, step=committed + 1, committed=committed)

    def on_failure(self, pos: Position, err: CollectiveError, workload: Workload) -> int:
        return EXIT_FAILED

    def after_step(self, pos: Position, workload: Workload) -> Position | int:
        params: RestartParams = self.spec.recovery.params
        if pos.world.group_rank == 0 and pos.committed % params.checkpoint_every == 0:
            save_checkpoint(self.spec.checkpoint_dir, workload, pos.committed, self.events)
        return super().after_step(pos, workload)
