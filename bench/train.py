"""The rank-side training loop shared by ``failstop``, ``reinit`` and ``restart``.

All three run the same steps over the same guarded collectives (:mod:`bench.comm`) and
emit the same events; they differ in how a world is formed and in what a rank does with
its first failed collective:

- ``failstop``: record the detection, exit non-zero.
- ``restart``: the same, but the world comes from torchrun (``env://``, generation =
  ``TORCHELASTIC_RESTART_COUNT``), rank 0 checkpoints every K steps and a restarted
  world resumes from the last checkpoint (``restore`` from disk).
- ``reinit``: publish an abort, agree on the next membership (:mod:`bench.world`), form
  a new group on a fresh store prefix, make state consistent (from a peer) and go on.
  With ``regrow``, a replacement started by the launcher joins at a step boundary and
  takes its state from a peer. Corruption found by the workload's checksum detector is
  repaired in place from a majority replica.

Exit codes: 0 finished, 1 failed (fail-stop, restart), 4 evicted (left out of the next
generation; the launcher does not count it as a fault), 3 crashed (see rank.py).
"""

from __future__ import annotations

import datetime
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from bench.comm import Comm, CollectiveError, CorruptionDetected, Watch
from bench.events import EventWriter
from bench.rank import RankSpec, device, store_client
from bench.state import restore_checkpoint, restore_from_peer, save_checkpoint
from bench.workloads import WORKLOADS
from bench.workloads.base import Workload
from bench.world import Membership, World

#: Objects that own process groups of past generations. They are never freed: a gloo
#: group's destructor joins a worker thread that may wait on a dead peer until its
#: timeout (or forever). The rank process ends with ``os._exit``, running no destructor.
_RETIRED: list[Any] = []

EXIT_EVICTED = 4


class KeyWatch:
    """Waits in a thread for one store key, on a connection of its own (a blocking
    ``wait`` holds its connection), so the training loop only reads an attribute."""

    def __init__(self, connect: Callable[[], Any], key: str, timeout_s: float) -> None:
        self.value: str | None = None
        threading.Thread(target=self._run, args=(connect, key, timeout_s), daemon=True,
                         name=f"ftbench-watch-{key}").start()

    def _run(self, connect: Callable[[], Any], key: str, timeout_s: float) -> None:
        try:
            client = connect()
            client.wait([key], datetime.timedelta(seconds=timeout_s))
            self.value = client.get(key).decode()
        except Exception:
            return  # deadline reached or store gone: nothing will be announced


def rank_main(spec: RankSpec, events: EventWriter) -> int:
    """Train ``workload.steps`` steps; returns the process exit code."""
    return Trainer(spec, events).run()


class Trainer:
    """One rank's loop and the state its recoveries need."""

    def __init__(self, spec: RankSpec, events: EventWriter) -> None:
        torch.set_num_threads(1)
        self.spec = spec
        self.events = events
        self.policy = spec.recovery.strategy
        self.regrow = self.policy == "reinit" and bool(spec.recovery.params.regrow)
        self.store: Any = None
        self.watch_store: Any = None
        self.membership: Membership | None = None
        if self.policy != "restart":
            self.store = self.connect()
            self.watch_store = self.connect() if self.policy == "reinit" else None
            self.membership = Membership(self.store, me=spec.rank, timeout_s=spec.wait_s,
                                         join_window_s=getattr(spec.recovery.params, "join_window_s", 0.0))
        self.hooks = _install_hooks(spec, events)
        wl = spec.workload
        self.workload: Workload = WORKLOADS[wl.kind].load()(wl.params, seed=spec.seed, world_size=wl.world_size,
                                                            device=device(spec))
        _RETIRED.append(self.workload)
        events.emit("workload_ready")

    def connect(self) -> Any:
        return store_client(self.spec)

    def run(self) -> int:
        spec, events, workload = self.spec, self.events, self.workload
        committed = 0
        if self.policy == "restart":
            world, comm = self.join_elastic()
            committed = restore_checkpoint(spec.checkpoint_dir, workload, events)
            workload.attach(comm)
        elif spec.role == "replacement":
            joined = self.join_running()
            if joined is None:
                return 0
            world, resume, comm = joined
            committed = resume - 1
        else:
            world = World(gen=0, members=spec.members, me=spec.rank)
            comm = self.form_group(world)
            workload.attach(comm)
        step = committed + 1
        events.emit("train_start", gen=world.gen, world_size=world.size, step=step)
        growth = self.watch_growth(world)

        while step <= spec.workload.steps:
            start = time.perf_counter()
            try:
                fields = workload.step(step)
            except (CollectiveError, RuntimeError) as exc:
                err = comm.as_failure(exc)
                if err is None:
                    raise
                events.emit("detect", how=err.how, error=str(err)[:300], gen=world.gen, step=step)
                if self.policy != "reinit":
                    return 1
                if isinstance(err, CorruptionDetected):
                    # Everyone learnt it from the same collective: no abort, no new group;
                    # the replicas that disagree take the majority's state.
                    restore_from_peer(workload, world, err.source, events)
                    committed, step = step, step + 1
                    continue
                recovered = self.recover(world, committed, err)
                if recovered is None:
                    events.emit("evicted", gen=world.gen)
                    return EXIT_EVICTED
                world, step, comm = recovered
                growth = self.watch_growth(world)
                continue
            events.emit("step_end", step=step, step_s=time.perf_counter() - start, gen=world.gen,
                        world_size=world.size, group_rank=world.group_rank, **fields)
            committed = step
            if self.policy == "restart" and world.group_rank == 0 and step % spec.recovery.params.checkpoint_every == 0:
                save_checkpoint(spec.checkpoint_dir, workload, step, events)
            if self.regrow and step + 1 < spec.workload.steps:
                if growth is not None and growth.value == "pending":
                    self.membership.announce_growth(world, step + 1)
                    growth = None  # announced: nothing more to watch in this generation
                # Read from the store itself, not from a watcher thread: the lockstep argument
                # of bench.world holds only for what the store has when this step ended.
                if self.membership.growth_step(world) == step:
                    grown = self.membership.grow(world)
                    if grown is None:
                        events.emit("evicted", gen=world.gen)
                        return EXIT_EVICTED
                    world = grown
                    comm, _ = self.reform(world, committed)
                    growth = self.watch_growth(world)
            step += 1
        if self.membership is not None and world.group_rank == 0:
            self.membership.close(world)  # joiners still waiting learn that nothing is left to join
        events.emit("train_end", step=committed, gen=world.gen, world_size=world.size, **workload.checksum())
        return 0

    # --- forming worlds ---------------------------------------------------------------

    def form_group(self, world: World) -> Comm:
        """Process group of generation ``world.gen`` on its own store prefix."""
        spec = self.spec
        dist.init_process_group(
            spec.backend, store=dist.PrefixStore(f"pg{world.gen}", self.store), rank=world.group_rank,
            world_size=world.size, timeout=datetime.timedelta(seconds=spec.workload.pg_timeout_s),
        )
        watch = None
        if self.watch_store is not None:
            watch = Watch(store=self.watch_store, key=Membership.abort_key(world.gen), timeout_s=spec.wait_s)
        self.events.emit("pg_ready", gen=world.gen, world_size=world.size, backend=spec.backend,
                         pg_timeout_s=spec.workload.pg_timeout_s)
        return Comm(group_rank=world.group_rank, group_size=world.size, backend=spec.backend, watch=watch,
                    hooks=self.hooks)

    def join_elastic(self) -> tuple[World, Comm]:
        """The world torchrun made: rank, size and rendezvous from its environment."""
        spec = self.spec
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        gen = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        dist.init_process_group(spec.backend, init_method="env://", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=spec.workload.pg_timeout_s))
        self.events.emit("pg_ready", gen=gen, world_size=size, backend=spec.backend,
                         pg_timeout_s=spec.workload.pg_timeout_s)
        if gen > 0:
            self.events.emit("reconfigured", gen=gen, world_size=size)
        return World(gen=gen, members=tuple(range(size)), me=rank), Comm(
            group_rank=rank, group_size=size, backend=spec.backend, hooks=self.hooks)

    def join_running(self) -> tuple[World, int, Comm] | None:
        """A replacement joins the running world at its next growth (or gives up if the
        job finished first)."""
        assert self.membership is not None
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
        return world, resume, comm

    def watch_growth(self, world: World) -> KeyWatch | None:
        """Rank 0 learns of joiners from a watcher thread (no per-step cost); a hint only."""
        if not self.regrow or world.group_rank != 0:
            return None
        return KeyWatch(self.connect, f"g{world.gen}/join", self.spec.wait_s)

    def recover(self, world: World, committed: int, err: CollectiveError) -> tuple[World, int, Comm] | None:
        """Re-form the group without the failed members; ``None`` if this rank was left out.

        A failure *during* recovery (another member dies) is handled the same way, one
        generation later; the number of attempts is bounded by the world size.
        """
        assert self.membership is not None
        how, message = err.how, str(err)
        for _ in range(len(world.members)):
            self.membership.report_failure(world.gen, how, message)
            nxt = self.membership.next_world(world)
            if nxt is None:
                return None
            self.events.emit("isolate", gen=nxt.gen, members=list(nxt.members),
                             excluded=sorted(set(world.members) - set(nxt.members)))
            try:
                comm, resume = self.reform(nxt, committed)
                return nxt, resume, comm
            except RuntimeError as again:  # CollectiveError included
                failure = again if isinstance(again, CollectiveError) else CollectiveError(str(again))
                how, message = failure.how, str(failure)
                self.events.emit("detect", how=how, error=message[:300], gen=nxt.gen, step=committed + 1)
                world = nxt
        raise CollectiveError("recovery failed: too many consecutive failures", "recovery_exhausted")

    def reform(self, world: World, committed: int) -> tuple[Comm, int]:
        """Form ``world``'s group, make the state consistent, attach; returns the resume step."""
        assert self.membership is not None
        if dist.is_initialized():
            _RETIRED.append(dist.group.WORLD)
            dist.destroy_process_group()
        comm = self.form_group(world)
        self.events.emit("reconfigured", gen=world.gen, world_size=world.size)
        resume, source = self.membership.agree_on_step(world, committed)
        if source >= 0:
            restore_from_peer(self.workload, world, source, self.events)
        self.workload.attach(comm)
        return comm, resume


def _install_hooks(spec: RankSpec, events: EventWriter) -> list[Any]:
    """Rank-side fault hooks of the scenario, armed by their real-time signals."""
    from bench.faults import FAULTS
    from injectors.rankside import install

    hooks = []
    for index, fault in enumerate(spec.faults):
        kind = FAULTS[fault.kind]
        if kind.rank_side is None:
            continue
        module, _, name = kind.rank_side.partition(":")
        cls = getattr(__import__(module, fromlist=[name]), name)

        def emit(event: str, _i: int = index, _k: str = fault.kind, **fields: Any) -> None:
            events.emit(event, fault=_i, kind=_k, ranks=[spec.rank], **fields)

        params = {f: getattr(fault.params, f) for f in fault.params.__dataclass_fields__}
        hooks.append((index, cls(emit=emit, seed=spec.seed * 7919 + spec.rank * 31 + index, **params)))
    install(hooks)
    return [h for _, h in hooks]
