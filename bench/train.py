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
  takes its state from a peer.

Exit codes: 0 finished, 1 failed (fail-stop, restart), 4 evicted (left out of the next
generation; the launcher does not count it as a fault), 3 crashed (see rank.py).
"""

from __future__ import annotations

import datetime
import io
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from bench.comm import Comm, CollectiveError, Watch
from bench.events import EventWriter
from bench.rank import RankSpec
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
    torch.set_num_threads(1)
    policy = spec.recovery.strategy
    regrow = policy == "reinit" and spec.recovery.params.regrow
    wl = spec.workload
    device = _device(spec)
    store = watch_store = membership = connect = None
    if policy != "restart":
        timeout = datetime.timedelta(seconds=spec.wait_s)

        def connect() -> Any:
            return dist.PrefixStore(spec.store_prefix,
                                    dist.TCPStore(spec.store_host, spec.store_port, None, False, timeout=timeout))

        store = connect()
        watch_store = connect() if policy == "reinit" else None
        membership = Membership(store, me=spec.rank, timeout_s=spec.wait_s,
                                join_window_s=getattr(spec.recovery.params, "join_window_s", 0.0))
    workload: Workload = WORKLOADS[wl.kind].load()(wl.params, seed=spec.seed, world_size=wl.world_size,
                                                   device=device)
    _RETIRED.append(workload)
    events.emit("workload_ready")
    committed = 0
    if policy == "restart":
        world, comm = _join_elastic(spec, events)
        committed = _restore_checkpoint(spec, workload, events)
        workload.attach(comm)
    elif spec.role == "replacement":
        assert membership is not None
        joined = _join_running(spec, membership, store, watch_store, workload, events)
        if joined is None:
            return 0
        world, resume, comm = joined
        committed = resume - 1
    else:
        world = World(gen=0, members=spec.members, me=spec.rank)
        comm = _form_group(spec, world, store, watch_store, events)
        workload.attach(comm)
    step = committed + 1
    events.emit("train_start", gen=world.gen, world_size=world.size, step=step)
    growth = _watch_growth(world, connect, spec) if regrow else None

    while step <= wl.steps:
        start = time.perf_counter()
        try:
            fields = workload.step(step)
        except (CollectiveError, RuntimeError) as exc:
            err = comm.as_failure(exc)
            if err is None:
                raise
            events.emit("detect", how=err.how, error=str(err)[:300], gen=world.gen, step=step)
            if policy != "reinit":
                return 1
            assert membership is not None
            recovered = _recover(spec, world, committed, err, membership, store, watch_store, workload, events)
            if recovered is None:
                events.emit("evicted", gen=world.gen)
                return EXIT_EVICTED
            world, step, comm = recovered
            growth = _watch_growth(world, connect, spec) if regrow else None
            continue
        events.emit("step_end", step=step, step_s=time.perf_counter() - start, gen=world.gen,
                    world_size=world.size, group_rank=world.group_rank, **fields)
        committed = step
        if policy == "restart" and world.group_rank == 0 and step % spec.recovery.params.checkpoint_every == 0:
            _save_checkpoint(spec, workload, step, events)
        if regrow and step + 1 < wl.steps:
            assert membership is not None
            if growth is not None and growth.value == "pending":
                membership.announce_growth(world, step + 1)
                growth = None  # announced: nothing more to watch in this generation
            # Read from the store itself, not from a watcher thread: the lockstep argument
            # of bench.world holds only for what the store has when this step ended.
            if membership.growth_step(world) == step:
                grown = membership.grow(world)
                if grown is None:
                    events.emit("evicted", gen=world.gen)
                    return EXIT_EVICTED
                world = grown
                comm, _ = _reform(spec, world, committed, membership, store, watch_store, workload, events)
                growth = _watch_growth(world, connect, spec)
        step += 1
    if membership is not None and world.group_rank == 0:
        membership.close(world)  # joiners still waiting learn that nothing is left to join
    events.emit("train_end", step=committed, gen=world.gen, world_size=world.size)
    return 0


def _watch_growth(world: World, connect: Any, spec: RankSpec) -> KeyWatch | None:
    """Rank 0 learns of joiners from a watcher thread (no per-step cost); a hint only."""
    return KeyWatch(connect, f"g{world.gen}/join", spec.wait_s) if world.group_rank == 0 else None


def _join_running(spec: RankSpec, membership: Membership, store: Any, watch_store: Any, workload: Workload,
                  events: EventWriter) -> tuple[World, int, Comm] | None:
    """A replacement joins the running world at its next growth (or gives up if the
    job finished first)."""
    while True:
        g = membership.request_join()
        events.emit("join_request", gen=g)
        if membership.finished():  # "done" is set before the last generation is closed
            events.emit("join_abandoned", gen=g)
            return None
        world = membership.admitted(g)
        if world is not None:
            break
    comm, resume = _reform(spec, world, -1, membership, store, watch_store, workload, events)
    return world, resume, comm


def _device(spec: RankSpec) -> torch.device:
    if spec.backend == "nccl":
        index = int(os.environ.get("LOCAL_RANK", spec.rank)) % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def _form_group(spec: RankSpec, world: World, store: Any, watch_store: Any, events: EventWriter) -> Comm:
    """Process group of generation ``world.gen`` on its own store prefix."""
    dist.init_process_group(
        spec.backend, store=dist.PrefixStore(f"pg{world.gen}", store), rank=world.group_rank,
        world_size=world.size, timeout=datetime.timedelta(seconds=spec.workload.pg_timeout_s),
    )
    watch = None
    if watch_store is not None:
        watch = Watch(store=watch_store, key=Membership.abort_key(world.gen), timeout_s=spec.wait_s)
    events.emit("pg_ready", gen=world.gen, world_size=world.size, backend=spec.backend,
                pg_timeout_s=spec.workload.pg_timeout_s)
    return Comm(group_rank=world.group_rank, group_size=world.size, backend=spec.backend, watch=watch)


def _join_elastic(spec: RankSpec, events: EventWriter) -> tuple[World, Comm]:
    """The world torchrun made: rank, size and rendezvous from its environment."""
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    gen = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.init_process_group(spec.backend, init_method="env://", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=spec.workload.pg_timeout_s))
    world = World(gen=gen, members=tuple(range(size)), me=rank)
    events.emit("pg_ready", gen=gen, world_size=size, backend=spec.backend, pg_timeout_s=spec.workload.pg_timeout_s)
    if gen > 0:
        events.emit("reconfigured", gen=gen, world_size=size)
    return world, Comm(group_rank=rank, group_size=size, backend=spec.backend)


def _checkpoint_path(spec: RankSpec) -> Path:
    return Path(spec.checkpoint_dir) / "latest.pt"


def _save_checkpoint(spec: RankSpec, workload: Workload, step: int, events: EventWriter) -> None:
    """Rank 0 writes the state it shares with every rank; atomic by rename."""
    path = _checkpoint_path(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save({"step": step, "state": workload.state_dict()}, tmp)
    os.replace(tmp, path)
    events.emit("checkpoint", step=step, bytes=path.stat().st_size, save_s=time.perf_counter() - start)


def _restore_checkpoint(spec: RankSpec, workload: Workload, events: EventWriter) -> int:
    """Load the last checkpoint, if any; returns the step it holds (0 without one)."""
    path = _checkpoint_path(spec)
    if not path.exists():
        return 0
    events.emit("restore_start", how="disk")
    saved = torch.load(path, weights_only=True)
    workload.load_state_dict(saved["state"])
    events.emit("restore_end", how="disk", bytes=path.stat().st_size, step=int(saved["step"]))
    return int(saved["step"])


def _recover(spec: RankSpec, world: World, committed: int, err: CollectiveError, membership: Membership,
             store: Any, watch_store: Any, workload: Workload,
             events: EventWriter) -> tuple[World, int, Comm] | None:
    """Re-form the group without the failed members; ``None`` if this rank was left out.

    A failure *during* recovery (another member dies) is handled the same way, one
    generation later; the number of attempts is bounded by the world size.
    """
    how, message = err.how, str(err)
    for _ in range(len(world.members)):
        membership.report_failure(world.gen, how, message)
        nxt = membership.next_world(world)
        if nxt is None:
            return None
        events.emit("isolate", gen=nxt.gen, members=list(nxt.members),
                    excluded=sorted(set(world.members) - set(nxt.members)))
        try:
            comm, resume = _reform(spec, nxt, committed, membership, store, watch_store, workload, events)
            return nxt, resume, comm
        except RuntimeError as again:  # CollectiveError included
            failure = again if isinstance(again, CollectiveError) else CollectiveError(str(again))
            how, message = failure.how, str(failure)
            events.emit("detect", how=how, error=message[:300], gen=nxt.gen, step=committed + 1)
            world = nxt
    raise CollectiveError("recovery failed: too many consecutive failures", "recovery_exhausted")


def _reform(spec: RankSpec, world: World, committed: int, membership: Membership, store: Any, watch_store: Any,
            workload: Workload, events: EventWriter) -> tuple[Comm, int]:
    """Form ``world``'s group, make the state consistent, attach; returns the resume step."""
    if dist.is_initialized():
        _RETIRED.append(dist.group.WORLD)
        dist.destroy_process_group()
    comm = _form_group(spec, world, store, watch_store, events)
    events.emit("reconfigured", gen=world.gen, world_size=world.size)
    resume, source = membership.agree_on_step(world, committed)
    if source >= 0:
        _restore_from_peer(workload, world, source, events)
    workload.attach(comm)
    return comm, resume


def _restore_from_peer(workload: Workload, world: World, source: int, events: EventWriter) -> None:
    """The member at group rank ``source`` sends its full state to the others."""
    events.emit("restore_start", source=world.members[source], how="peer")
    if world.group_rank == source:
        buf = io.BytesIO()
        torch.save(workload.state_dict(), buf)
        payload = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        size = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        size = torch.zeros(1, dtype=torch.int64)
    dist.broadcast(size, src=source)
    if world.group_rank != source:
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.broadcast(payload, src=source)
    if world.group_rank != source:
        workload.load_state_dict(torch.load(io.BytesIO(payload.numpy().tobytes()), weights_only=True))
    events.emit("restore_end", source=world.members[source], bytes=int(size.item()), how="peer")
