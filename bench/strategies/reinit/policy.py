"""reinit's rank side: abort through the store, re-form the group, go on; grow back.

Every collective goes through the abortable collectives of ``collectives.py`` (a watcher
thread fails their futures when the generation's abort key appears), because a gloo
survivor blocked on another survivor would otherwise sit in the process-group timeout.
Membership decisions are :class:`~bench.strategies.reinit.membership.Membership`'s.
Corruption found by the workload's checksum detector is repaired in place from a
majority replica, without a new group.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch.distributed as dist

from bench.procs.events import EventWriter
from bench.rank.comm import CollectiveError, CorruptionDetected, Hook
from bench.rank.entry import EXIT_LEFT, RankSpec, store_client
from bench.rank.loop import RETIRED
from bench.rank.policy import Position, RankPolicy, World
from bench.rank.state import restore_from_peer
from bench.rank.workload import Workload
from bench.strategies.reinit import ReinitParams
from bench.strategies.reinit.collectives import AbortableCollectives, Watch
from bench.strategies.reinit.membership import Membership


class KeyWatch:
    """Waits in a thread for one store key, on a connection of its own (a blocking
    ``wait`` holds its connection), so the training loop only reads an attribute."""

    def __init__(self, connect: Callable[[], Any], key: str, timeout_s: float) -> None:
        self.value: str | None = None
        threading.Thread(
            target=self._run, args=(connect, key, timeout_s), daemon=True, name=f"ftbench-watch-{key}"
        ).start()

    def _run(self, connect: Callable[[], Any], key: str, timeout_s: float) -> None:
        try:
            client = connect()
            client.wait([key], datetime.timedelta(seconds=timeout_s))
            self.value = client.get(key).decode()
        except Exception:
            return  # deadline reached or store gone: nothing will be announced


class Reinit(RankPolicy):
    def __init__(self, spec: RankSpec, events: EventWriter, hooks: Sequence[Hook]) -> None:
        super().__init__(spec, events, hooks)
        self.params: ReinitParams = spec.recovery.params
        self.store = store_client(spec)
        self.watch_store = store_client(spec)
        self.membership = Membership(
            self.store, me=spec.rank, timeout_s=spec.wait_s, join_window_s=self.params.join_window_s
        )
        self.growth: KeyWatch | None = None
        self.workload: Workload | None = None

    # --- the RankPolicy contract ---------------------------------------------------------

    def start(self, workload: Workload) -> Position | None:
        self.workload = workload
        if self.spec.role == "replacement":
            return self.join_running()
        world = World(gen=0, members=self.spec.members, me=self.spec.rank)
        comm = self.form_group(world)
        workload.attach(comm)
        self.watch_growth(world)
        return Position(world=world, comm=comm, step=1, committed=0)

    def on_failure(self, pos: Position, err: CollectiveError, workload: Workload) -> Position | int:
        if isinstance(err, CorruptionDetected):
            # Everyone learnt it from the same collective: no abort, no new group; the
            # replicas that disagree take the majority's state.
            restore_from_peer(workload, pos.world, err.source, self.events)
            return Position(world=pos.world, comm=pos.comm, step=pos.step + 1, committed=pos.step)
        recovered = self.recover(pos.world, pos.committed, err)
        if recovered is None:
            self.events.emit("evicted", gen=pos.world.gen)
            return EXIT_LEFT
        self.watch_growth(recovered.world)
        return recovered

    def after_step(self, pos: Position, workload: Workload) -> Position | int:
        world, step = pos.world, pos.committed
        nxt = Position(world=world, comm=pos.comm, step=step + 1, committed=step)
        if not self.params.regrow or step + 1 >= self.spec.workload.steps:
            return nxt
        if self.growth is not None and self.growth.value == "pending":
            self.membership.announce_growth(world, step + 1)
            self.growth = None  # announced: nothing more to watch in this generation
        # Read from the store itself, not from a watcher thread: the lockstep argument of
        # the membership protocol holds only for what the store has when this step ended.
        if self.membership.growth_step(world) != step:
            return nxt
        grown = self.membership.grow(world)
        if grown is None:
            self.events.emit("evicted", gen=world.gen)
            return EXIT_LEFT
        comm, _ = self.reform(grown, step)
        self.watch_growth(grown)
        return Position(world=grown, comm=comm, step=step + 1, committed=step)

    def finish(self, pos: Position) -> None:
        if pos.world.group_rank == 0:
            self.membership.close(pos.world)  # joiners still waiting learn that nothing is left to join

    # --- forming worlds ------------------------------------------------------------------

    def form_group(self, world: World) -> AbortableCollectives:
        """Process group of generation ``world.gen`` on its own store prefix."""
        spec = self.spec
        self.init_group(
            gen=world.gen, rank=world.group_rank, size=world.size, store=dist.PrefixStore(f"pg{world.gen}", self.store)
        )
        watch = Watch(store=self.watch_store, key=Membership.abort_key(world.gen), timeout_s=spec.wait_s)
        return AbortableCollectives(
            group_rank=world.group_rank, group_size=world.size, backend=spec.backend, watch=watch, hooks=self.hooks
        )

    def join_running(self) -> Position | None:
        """A replacement joins the running world at its next growth (or gives up if the
        job finished first)."""
        while True:
            g = self.membership.request_join()
            self.events.emit("join_request", gen=g)
            if self.membership.finished():  # "done" is set before the last generation is closed
                self.events.emit("join_abandoned", gen=g)
                return None
            world = self.membership.admitted(g)
            if world is not None:
                break
        comm, resume = self.reform(world, -1)
        self.watch_growth(world)
        return Position(world=world, comm=comm, step=resume, committed=resume - 1)

    def watch_growth(self, world: World) -> None:
        """Rank 0 learns of joiners from a watcher thread (no per-step cost); a hint only."""
        self.growth = None
        if self.params.regrow and world.group_rank == 0:
            self.growth = KeyWatch(lambda: store_client(self.spec), f"g{world.gen}/join", self.spec.wait_s)

    def recover(self, world: World, committed: int, err: CollectiveError) -> Position | None:
        """Re-form the group without the failed members; ``None`` if this rank was left out.

        A failure *during* recovery (another member dies) is handled the same way, one
        generation later; the number of attempts is bounded by the world size.
        """
        how, message = err.how, str(err)
        for _ in range(len(world.members)):
            self.membership.report_failure(world.gen, how, message)
            nxt = self.membership.next_world(world)
            if nxt is None:
                return None
            self.events.emit(
                "isolate",
                gen=nxt.gen,
                members=list(nxt.members),
                excluded=sorted(set(world.members) - set(nxt.members)),
            )
            try:
                comm, resume = self.reform(nxt, committed)
                return Position(world=nxt, comm=comm, step=resume, committed=resume - 1)
            except RuntimeError as again:  # CollectiveError included
                failure = again if isinstance(again, CollectiveError) else CollectiveError(str(again))
                how, message = failure.how, str(failure)
                self.events.emit("detect", how=how, error=message[:300], gen=nxt.gen, step=committed + 1)
                world = nxt
        raise CollectiveError("recovery failed: too many consecutive failures", "recovery_exhausted")

    def reform(self, world: World, committed: int) -> tuple[AbortableCollectives, int]:
        """Form ``world``'s group, make the state consistent, attach; returns the resume step."""
        assert self.workload is not None
        if dist.is_initialized():
            RETIRED.append(dist.group.WORLD)
            dist.destroy_process_group()
        comm = self.form_group(world)
        self.events.emit("reconfigured", gen=world.gen, world_size=world.size)
        resume, source = self.membership.agree_on_step(world, committed)
        if source >= 0:
            restore_from_peer(self.workload, world, source, self.events)
        self.workload.attach(comm)
        return comm, resume
