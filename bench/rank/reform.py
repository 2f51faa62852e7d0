"""The rank side of an in-process recovery: survivors agree on a smaller world, re-form
their communicator in the same processes, make their state consistent and train on.

Two strategies share it and differ only in how a world's communicator is formed
(:meth:`ReformingPolicy.form`): ftbench's own ``reinit`` destroys the group and makes a
new one on a fresh store prefix; ``torch-reconfigure`` keeps torch's process group and
re-forms it in place with torch's own ``_reconfigure``. What torch does not provide, both
take from here: who is in the next world (:class:`~bench.rank.membership.Membership`,
over the launcher's store), which committed step everyone resumes after and from whose
state (a live peer's, sent over the new group), and growing back to full strength when
a replacement joins (``regrow``). Corruption found by the workload's checksum detector
is repaired in place from a majority replica, without a new group.
"""

from __future__ import annotations

import datetime
import threading
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from bench.procs.events import EventWriter
from bench.rank.comm import CollectiveError, Collectives, CorruptionDetected, Hook
from bench.rank.entry import EXIT_LEFT, RankSpec, store_client
from bench.rank.membership import Left, Membership
from bench.rank.policy import Position, RankPolicy, World
from bench.rank.relay import local_address
from bench.rank.state import restore_from_peer
from bench.rank.workload import Workload


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


class ReformingPolicy(RankPolicy):
    """In-process recovery with the world re-formed by :meth:`form`.

    The strategy's knobs must carry ``regrow`` (start a replacement for each death and
    grow back at a step boundary); :meth:`join_window_s` says how long the coordinator
    waits for members that neither check in nor are known dead."""

    def __init__(self, spec: RankSpec, events: EventWriter, hooks: Sequence[Hook]) -> None:
        super().__init__(spec, events, hooks)
        self.regrow: bool = spec.recovery.params.regrow
        self.store = store_client(spec)
        self.watch_store = store_client(spec)
        self.membership = Membership(
            self.store,
            me=spec.rank,
            timeout_s=spec.wait_s,
            join_window_s=self.join_window_s(),
            relay_host=local_address(spec.store_host),
        )
        self.growth: KeyWatch | None = None
        self.workload: Workload | None = None

    @abstractmethod
    def join_window_s(self) -> float:
        """How long the agreement waits, after the last check-in or reported death, for a
        member neither here nor known dead."""

    @abstractmethod
    def form(self, world: World) -> Collectives:
        """Form ``world``'s communicator: the first one, or after a failure or a growth
        (this process may be a joiner with none yet)."""

    # --- the RankPolicy contract ---------------------------------------------------------

    def start(self, workload: Workload) -> Position | None:
        self.workload = workload
        if self.spec.role == "replacement":
            return self.join_running()
        world = World(gen=0, members=self.spec.members, me=self.spec.rank)
        comm = self.form(world)
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
        if isinstance(recovered, Left):
            return self.left_out(recovered)
        self.watch_growth(recovered.world)
        return recovered

    def after_step(self, pos: Position, workload: Workload) -> Position | int:
        world, step = pos.world, pos.committed
        nxt = Position(world=world, comm=pos.comm, step=step + 1, committed=step)
        if not self.regrow or step + 1 >= self.spec.workload.steps:
            return nxt
        if self.growth is not None and self.growth.value == "pending":
            self.membership.announce_growth(world, step + 1)
            self.growth = None  # announced: nothing more to watch in this generation
        # Read from the store itself, not from a watcher thread: the lockstep argument of
        # the membership protocol holds only for what the store has when this step ended.
        if self.membership.growth_step(world) != step:
            return nxt
        grown = self.membership.grow(world)
        if isinstance(grown, Left):
            return self.left_out(grown)
        comm, _ = self.reform(grown, step)
        self.watch_growth(grown)
        return Position(world=grown, comm=comm, step=step + 1, committed=step)

    def finish(self, pos: Position) -> None:
        if pos.world.group_rank == 0:
            self.membership.close(pos.world)  # joiners still waiting learn that nothing is left to join

    # --- worlds ------------------------------------------------------------------------

    def left_out(self, left: Left) -> Position | int:
        """The next world was agreed without this rank (it checked in after the agreement
        closed: it was stalled, or late). It is not dropped without knowing: it records
        why, and where the job takes joiners it rejoins the running world at its next step
        boundary, taking its state from a peer, as a replacement would (it has torch and
        its workload already); otherwise it leaves cleanly."""
        self.events.emit("evicted", gen=left.gen, why=left.why, rejoin=self.regrow)
        if not self.regrow:
            return EXIT_LEFT
        rejoined = self.join_running()
        return EXIT_LEFT if rejoined is None else rejoined

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
        if self.regrow and world.group_rank == 0:
            self.growth = KeyWatch(lambda: store_client(self.spec), f"g{world.gen}/join", self.spec.wait_s)

    def recover(self, world: World, committed: int, err: CollectiveError) -> Position | Left:
        """Re-form the group without the failed members; :class:`Left` if this rank is
        not in the next world.

        A failure *during* recovery (another member dies) is handled the same way, one
        generation later; the number of attempts is bounded by the world size.
        """
        how, message = err.how, str(err)
        for _ in range(len(world.members)):
            self.membership.report_failure(world.gen, how, message)
            nxt = self.membership.next_world(world)
            if isinstance(nxt, Left):
                return nxt
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

    def reform(self, world: World, committed: int) -> tuple[Collectives, int]:
        """Form ``world``'s communicator, make the state consistent, attach; returns the
        resume step."""
        assert self.workload is not None
        comm = self.form(world)
        self.events.emit("reconfigured", gen=world.gen, world_size=world.size)
        resume, source = self.membership.agree_on_step(world, committed)
        if source >= 0:
            restore_from_peer(self.workload, world, source, self.events)
        self.workload.attach(comm)
        return comm, resume
