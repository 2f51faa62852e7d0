"""reinit's rank side: abort through the store, form a new group, go on; grow back.

Every collective goes through the abortable collectives of :mod:`bench.rank.abortable`
(a watcher thread fails their futures when the generation's abort key appears), because
a gloo survivor blocked on another survivor would otherwise sit in the process-group
timeout. A world's group is a new one, on a fresh store prefix, after the old one is
destroyed; everything else (membership, resume step, state, growth) is the shared
in-process recovery of :mod:`bench.rank.reform`.
"""

from __future__ import annotations

import torch.distributed as dist

from bench.rank.abortable import AbortableCollectives, Watch
from bench.rank.loop import RETIRED
from bench.rank.membership import Membership
from bench.rank.policy import World
from bench.rank.reform import ReformingPolicy
from bench.strategies.reinit import ReinitParams


class Reinit(ReformingPolicy):
    def join_window_s(self) -> float:
        params: ReinitParams = self.spec.recovery.params
        return params.join_window_s

    def form(self, world: World) -> AbortableCollectives:
        """Process group of generation ``world.gen`` on its own store prefix."""
        spec = self.spec
        if dist.is_initialized():
            RETIRED.append(dist.group.WORLD)
            dist.destroy_process_group()
        self.init_group(
            gen=world.gen, rank=world.group_rank, size=world.size, store=dist.PrefixStore(f"pg{world.gen}", self.store)
        )
        watch = Watch(store=self.watch_store, key=Membership.abort_key(world.gen), timeout_s=spec.wait_s)
        return AbortableCollectives(
            group_rank=world.group_rank, group_size=world.size, backend=spec.backend, watch=watch, hooks=self.hooks
        )
