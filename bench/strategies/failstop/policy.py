"""Fail-stop's rank side: one process group for the whole job, the first failure ends it."""

from __future__ import annotations

import torch.distributed as dist

from bench.rank.comm import CollectiveError, StockCollectives
from bench.rank.entry import EXIT_FAILED, store_client
from bench.rank.policy import RAISE, Position, Raise, RankPolicy, World
from bench.rank.workload import Workload


class FailStop(RankPolicy):
    def start(self, workload: Workload) -> Position:
        spec = self.spec
        world = World(gen=0, members=spec.members, me=spec.rank)
        self.init_group(
            gen=0, rank=world.group_rank, size=world.size, store=dist.PrefixStore("pg0", store_client(spec))
        )
        comm = StockCollectives(
            group_rank=world.group_rank, group_size=world.size, hooks=self.hooks, interpose=spec.interpose
        )
        workload.attach(comm)
        return Position(world=world, comm=comm, step=1, committed=0)

    def on_failure(self, pos: Position, err: CollectiveError, workload: Workload) -> int | Raise:
        return RAISE if self.spec.recovery.params.exit == "raise" else EXIT_FAILED
