"""giveup's rank side: one group for the job; the first failure ends the rank."""

from __future__ import annotations

import torch.distributed as dist

from bench.rank.comm import CollectiveError, StockCollectives
from bench.rank.entry import store_client
from bench.rank.policy import Position, RankPolicy, World
from bench.rank.workload import Workload
from tests.plugins.giveup import GiveUpParams


class GiveUp(RankPolicy):
    def start(self, workload: Workload) -> Position:
        spec = self.spec
        world = World(gen=0, members=spec.members, me=spec.rank)
        # torch's own init_process_group with the trial's backend and timeout, then the
        # pg_ready event the figures read
        self.init_group(
            gen=0, rank=world.group_rank, size=world.size, store=dist.PrefixStore("pg0", store_client(spec))
        )
        comm = StockCollectives(
            group_rank=world.group_rank, group_size=world.size, hooks=self.hooks, interpose=spec.interpose
        )
        workload.attach(comm)
        return Position(world=world, comm=comm, step=1, committed=0)

    def on_failure(self, pos: Position, err: CollectiveError, workload: Workload) -> int:
        params: GiveUpParams = self.spec.recovery.params
        self.events.emit("gave_up", step=pos.step, how=err.how)
        return params.exit_code
