"""torch-reconfigure's rank side: torch's own group, re-formed in place by ``_reconfigure``.

What torch does, measured on gloo (docs/facts.md): ``init_process_group(...,
enable_reconfigure=True)`` creates a group that connects to no one until the first
``dist._reconfigure``, so the first world is formed by a reconfigure too. Each call takes
a fresh uuid and one handle per member (``dist._get_reconfigure_handle()``, which changes
with every reconfigure, so it is published anew for each generation), in the order that
assigns the ranks, and blocks until every listed member has called it. The process group
object stays the same, so DDP and every collective keep calling torch's own code.

How a survivor learns of the failure is ``notify`` (see the knob): the rank that fails
first always posts it to the store (that is how the membership protocol starts), and
with ``abort`` or ``get-error`` a thread calls torch's ``ProcessGroup.abort()``, guarded
so that it never aborts a generation this rank has already left.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist

from bench.procs.events import EventWriter
from bench.rank.abortable import AbortableCollectives, Watch
from bench.rank.comm import CollectiveError, Collectives, Hook, StockCollectives
from bench.rank.entry import RankSpec, store_client
from bench.rank.membership import GENERATION_OVER, Membership
from bench.rank.policy import Position, World
from bench.rank.reform import ReformingPolicy
from bench.rank.workload import Workload
from bench.strategies.torch_reconfigure import TorchReconfigureParams


def world_group() -> dist.ProcessGroup:
    group = dist.group.WORLD
    assert group is not None, "the process group is initialised before any generation"
    return group


class Notifier:
    """For one generation: a thread that aborts torch's process group when the failure
    is posted to the store (``abort``) or the backend reports an error (``get-error``),
    unless this rank has left that generation (:meth:`leave`) first."""

    def __init__(self, policy: TorchReconfigure, gen: int) -> None:
        self.policy = policy
        self.gen = gen
        self.lock = threading.Lock()
        self.active = True
        threading.Thread(target=self._run, daemon=True, name=f"ftbench-notify-g{gen}").start()

    def leave(self) -> None:
        """This rank is done with the generation: waits out an abort already under way."""
        with self.lock:
            self.active = False

    def _run(self) -> None:
        params, spec = self.policy.params, self.policy.spec
        how = "store"
        try:
            if params.notify == "abort":
                client = store_client(spec)
                key = Membership.abort_key(self.gen)
                client.wait([key], datetime.timedelta(seconds=spec.wait_s))
                if client.get(key).decode(errors="replace") == GENERATION_OVER:
                    return  # the generation grew or training ended: nothing failed
            else:
                backend = world_group()._get_backend(torch.device("cpu"))
                while self.active:
                    error = backend.get_error()
                    if error != dist.ErrorType.SUCCESS:  # type: ignore[attr-defined]  # torch >= 2.14 (checked on 2.13)
                        how = f"get_error:{error.name}"
                        break
                    time.sleep(params.poll_ms / 1e3)
        except Exception:
            return  # the trial's deadline, or the store is gone
        with self.lock:
            if not self.active:
                return
            if how != "store":
                self.policy.events.emit("detect", how=how, gen=self.gen, site="get_error")
            world_group().abort()
            self.policy.events.emit("abort", gen=self.gen, how=how)


class TorchReconfigure(ReformingPolicy):
    def __init__(self, spec: RankSpec, events: EventWriter, hooks: Sequence[Hook]) -> None:
        self.params: TorchReconfigureParams = spec.recovery.params
        super().__init__(spec, events, hooks)
        self.notifier: Notifier | None = None

    def join_window_s(self) -> float:
        if self.params.join_window_s:
            return self.params.join_window_s
        return 0.5 if self.params.notify == "abandon" else self.spec.workload.pg_timeout_s + 1.0

    def on_failure(self, pos: Position, err: CollectiveError, workload: Workload) -> Position | int:
        if self.notifier is not None:
            self.notifier.leave()
        return super().on_failure(pos, err, workload)

    def form(self, world: World) -> Collectives:
        spec, g = self.spec, world.gen
        if self.notifier is not None:
            self.notifier.leave()  # a growth: this generation ends without a failure
        if not dist.is_initialized():
            # The reconfigure regime: the group exists and connects to no one yet. Its rank
            # and size only name this process until the first _reconfigure assigns them.
            self.init_group(
                gen=g,
                rank=spec.rank,
                size=spec.workload.world_size,
                store=dist.PrefixStore("pg", self.store),
                enable_reconfigure=True,
            )
        timeout = datetime.timedelta(seconds=self.params.reconfigure_timeout_s)
        # torch >= 2.14's API; the type check runs against torch 2.13, which lacks it.
        handle = dist._get_reconfigure_handle()  # type: ignore[attr-defined]
        handles = self.membership.exchange_handles(world, handle, timeout)
        self.events.emit("handles", gen=g, world_size=world.size)
        # uuid: fresh for every reconfigure of this group, the same for all its members.
        dist._reconfigure(g + 1, handles, timeout=timeout).wait()  # type: ignore[attr-defined]
        if self.params.notify == "abandon":
            watch = Watch(store=self.watch_store, key=Membership.abort_key(g), timeout_s=spec.wait_s)
            return AbortableCollectives(
                group_rank=world.group_rank, group_size=world.size, backend=spec.backend, watch=watch, hooks=self.hooks
            )
        self.notifier = Notifier(self, g) if self.params.notify in ("abort", "get-error") else None
        return StockCollectives(
            group_rank=world.group_rank, group_size=world.size, hooks=self.hooks, interpose=spec.interpose
        )
