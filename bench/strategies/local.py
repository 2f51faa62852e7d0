"""``failstop`` and ``reinit``: ranks started by the local launcher.

Both run the same training loop over the same guarded collectives; they differ only in
what a rank does with its first failed collective:

- **failstop** (the old model): the rank records the detection and exits non-zero. The
  job ends when every rank has failed on its own (cascading connection errors, or the
  process-group timeout); nothing tears it down early, so ``ttd_all_s`` shows how long
  plain ``torch.distributed`` takes to tell everyone.
- **reinit** (in-process recovery): the rank publishes an abort through the store so
  that every peer stops waiting at once, the survivors agree on the next membership
  (:mod:`bench.world`), form a new process group on a fresh store prefix, make their
  state consistent (a peer sends its state if committed steps differ) and train on.
  A stalled rank that wakes up after the survivors moved on finds itself left out and
  exits cleanly (``evicted``); the job does not wait for it or take it back.

The launcher's monitor acts as the node agent: it reaps rank processes, records their
exits (``detect`` with ``how = "exit"``) and writes ``dead/<rank>`` to the store so the
reinit coordinator need not wait for a member that is known to be gone.
"""

from __future__ import annotations

import datetime
import io
import os
import time
from typing import Any, ClassVar

import torch
import torch.distributed as dist

from bench.comm import Comm, CollectiveError, Watch
from bench.events import EventWriter
from bench.launch import LocalLauncher
from bench.rank import RankSpec, main as rank_process_main
from bench.strategies.base import Job, TrialContext
from bench.workloads import WORKLOADS
from bench.workloads.base import Workload
from bench.world import Membership, World


class LocalJob(Job):
    """Store + N rank processes on this host, with the launcher as agent."""

    policy: ClassVar[str]
    phases = (("isolate", "isolate"), ("reconfigure", "reconfigured"), ("restore", "restore_end"))

    def start(self) -> None:
        ctx = self.ctx
        scenario = ctx.point.scenario
        self.agent = EventWriter(ctx.events_dir / "agent.jsonl", src="agent", pid=os.getpid())
        self.launcher = LocalLauncher(host=ctx.host, start_method=scenario.launch.start_method,
                                      trial_dir=ctx.trial_dir, events_dir=ctx.events_dir)
        port = self.launcher.start_store()
        self.store = dist.PrefixStore("ftb", dist.TCPStore("127.0.0.1", port, None, False,
                                                            timeout=datetime.timedelta(seconds=30)))
        members = tuple(range(scenario.workload.world_size))
        for rank in members:
            spec = RankSpec(
                rank=rank, members=members, store_port=port, events_dir=str(ctx.events_dir),
                entry="bench.strategies.local:rank_main", workload=scenario.workload,
                recovery=scenario.recovery, backend=ctx.backend, seed=ctx.seed, wait_s=ctx.deadline_s,
            )
            self.launcher.start_rank(rank, rank_process_main, spec)

    def poll(self, timeout_s: float) -> bool:
        for r in self.launcher.wait(timeout_s):
            code = r.exitcode
            self.agent.emit("proc_exit", of_rank=r.rank, exitcode=code)
            if code != 0:
                self.agent.emit("detect", how="exit", of_rank=r.rank, exitcode=code)
            try:
                self.store.set(f"dead/{r.rank}", str(code))
            except Exception:  # the store itself may be the fault's target
                pass
        return not self.launcher.running()

    def close(self) -> None:
        if hasattr(self, "launcher"):
            self.launcher.close()
        if hasattr(self, "agent"):
            self.agent.close()


class FailStop(LocalJob):
    policy = "failstop"


class Reinit(LocalJob):
    policy = "reinit"


# --- rank side ---------------------------------------------------------------------------

#: Objects that own process groups of past generations. They are never freed: a gloo
#: group's destructor joins a worker thread that may wait on a dead peer until its
#: timeout (or forever). The rank process ends with ``os._exit``, running no destructor.
_RETIRED: list[Any] = []


def rank_main(spec: RankSpec, events: EventWriter) -> int:
    """The training loop of one rank; returns the process exit code."""
    torch.set_num_threads(1)
    reinit = spec.recovery.strategy == "reinit"
    timeout = datetime.timedelta(seconds=spec.wait_s)

    def client() -> Any:
        return dist.PrefixStore(spec.store_prefix,
                                dist.TCPStore(spec.store_host, spec.store_port, None, False, timeout=timeout))

    store = client()
    watch_store = client() if reinit else None
    device = _device(spec)
    membership = Membership(store, me=spec.rank, timeout_s=spec.wait_s,
                            join_window_s=getattr(spec.recovery.params, "join_window_s", 0.0))
    wl = spec.workload
    workload: Workload = WORKLOADS[wl.kind].load()(wl.params, seed=spec.seed, world_size=len(spec.members),
                                                   device=device)
    _RETIRED.append(workload)
    world = World(gen=0, members=spec.members, me=spec.rank)
    comm = _form_group(spec, world, store, watch_store, events)
    workload.attach(comm)
    events.emit("train_start", gen=0, world_size=world.size)

    step, committed = 1, 0
    while step <= wl.steps:
        start = time.perf_counter()
        try:
            fields = workload.step(step)
        except (CollectiveError, RuntimeError) as exc:
            err = comm.as_failure(exc)
            if err is None:
                raise
            events.emit("detect", how=err.how, error=str(err)[:300], gen=world.gen, step=step)
            if not reinit:
                return 1
            recovered = _recover(spec, world, committed, err, membership, store, watch_store, workload, events)
            if recovered is None:
                events.emit("evicted", gen=world.gen)
                return 0
            world, step, comm = recovered
            continue
        events.emit("step_end", step=step, step_s=time.perf_counter() - start, gen=world.gen,
                    world_size=world.size, group_rank=world.group_rank, **fields)
        committed = step
        step += 1
    events.emit("train_end", step=committed, gen=world.gen, world_size=world.size)
    return 0


def _device(spec: RankSpec) -> torch.device:
    if spec.backend == "nccl":
        index = spec.rank % torch.cuda.device_count()
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


def _recover(spec: RankSpec, world: World, committed: int, err: CollectiveError, membership: Membership,
             store: Any, watch_store: Any, workload: Workload, events: EventWriter) -> tuple[World, int, Comm] | None:
    """Re-form the group without the failed members; ``None`` if this rank was left out.

    A failure *during* recovery (another member dies) is handled the same way, one
    generation later; the number of attempts is bounded by the world size.
    """
    how, message = err.how, str(err)
    for _ in range(len(spec.members)):
        membership.report_failure(world.gen, how, message)
        nxt = membership.next_world(world)
        if nxt is None:
            return None
        events.emit("isolate", gen=nxt.gen, members=list(nxt.members),
                    excluded=sorted(set(world.members) - set(nxt.members)))
        _RETIRED.append(dist.group.WORLD)
        dist.destroy_process_group()
        try:
            comm = _form_group(spec, nxt, store, watch_store, events)
            events.emit("reconfigured", gen=nxt.gen, world_size=nxt.size)
            resume, source = membership.agree_on_step(nxt, committed)
            if source >= 0:
                _restore_from_peer(workload, nxt, source, events)
            workload.attach(comm)
            return nxt, resume, comm
        except RuntimeError as again:  # CollectiveError included
            failure = again if isinstance(again, CollectiveError) else CollectiveError(str(again))
            how, message = failure.how, str(failure)
            events.emit("detect", how=how, error=message[:300], gen=nxt.gen, step=committed + 1)
            world = nxt
    raise CollectiveError("recovery failed: too many consecutive failures", "recovery_exhausted")


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
