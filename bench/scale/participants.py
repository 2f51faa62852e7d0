"""The participants' side of each coordinator: the stacks' own client classes, one
object per participant, driven by :mod:`bench.scale.worker` (one thread per participant
per operation).

Every participant is built from a :class:`Context` and answers :meth:`setup` (connect:
not timed, except where connecting is the operation), :meth:`run` (one operation, until
this participant has its result), :meth:`kill` (what its death leaves behind, for the
victim of an operation) and :meth:`close`. A participant raises when its result is not
what the protocol promises (a round of the wrong size), so a wrong answer is never a
fast one.

Imported only in worker processes: it imports torch, and torchft or NVRx where the
coordinator is theirs.
"""

from __future__ import annotations

import datetime
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch.distributed as dist

HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Context:
    """What every participant of one point knows."""

    coordinator: str
    n: int
    """Participants in the point."""
    address: str
    """Where the coordinator listens (``host:port``, or the lighthouse's URL)."""
    port: int
    rep: int
    deadline_s: float
    knobs: dict[str, Any] = field(default_factory=dict)
    host: str = HOST
    """The address a store client connects to: loopback on one machine, the coordinator's
    host where participants are spread over several."""

    @property
    def victim(self) -> int:
        return self.n - 1

    @property
    def timeout(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.deadline_s)


class Participant:
    def __init__(self, ctx: Context, index: int) -> None:
        self.ctx = ctx
        self.index = index

    def setup(self) -> None:
        """Connect (not timed)."""

    def run(self, op: str) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        """What this participant's death leaves behind (it takes part in nothing after)."""

    def close(self) -> None:
        """Let go of connections and threads."""

    def client(self) -> dist.TCPStore:
        return dist.TCPStore(self.ctx.host, self.ctx.port, None, False, timeout=self.ctx.timeout)


class StoreClient(Participant):
    """A rank's ``TCPStore`` client (either server backend: the client is the same)."""

    store: dist.TCPStore | None = None

    def run(self, op: str) -> None:
        if op == "connect":
            self.store = self.client()
            return
        assert self.store is not None, "connect first"
        if op == "barrier":
            from torch.distributed.distributed_c10d import _store_based_barrier

            group: Any = f"scale{self.ctx.rep}"  # a GroupName is a str
            _store_based_barrier(self.index, self.store, group, self.ctx.n, self.ctx.timeout)
        elif op == "get":
            key = f"scale{self.ctx.rep}/value"
            if self.index == 0:
                self.store.set(key, "x" * int(self.ctx.knobs.get("value_bytes", 64)))
            else:
                self.store.get(key)
        else:
            raise ValueError(op)

    def close(self) -> None:
        self.store = None


class Agent(Participant):
    """A torchrun agent's rendezvous: ``DynamicRendezvousHandler`` over
    ``C10dRendezvousBackend``, one store client each (an agent of its own host)."""

    def setup(self) -> None:
        from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
            DynamicRendezvousHandler,
            RendezvousTimeout,
        )

        k, n = self.ctx.knobs, self.ctx.n
        run_id = f"scale{self.ctx.rep}"
        self.store: dist.TCPStore | None = self.client()
        self.handler: Any = DynamicRendezvousHandler.from_backend(
            run_id,
            self.store,
            C10dRendezvousBackend(self.store, run_id),
            min_nodes=max(1, n - 1),
            max_nodes=n,
            local_addr=f"host{self.index}",
            timeout=RendezvousTimeout(
                join=self.ctx.timeout, last_call=datetime.timedelta(seconds=float(k["rdzv_last_call_s"]))
            ),
            keep_alive_interval=float(k["rdzv_keep_alive_s"]),  # type: ignore[arg-type]  # seconds, float is fine
            keep_alive_max_attempt=int(k["rdzv_keep_alive_attempts"]),
        )

    def run(self, op: str) -> None:
        info = self.handler.next_rendezvous()
        want = self.ctx.n - (1 if op == "kill" else 0)
        if info.world_size != want:
            raise RuntimeError(f"a round of {info.world_size} agents, not {want}")

    def kill(self) -> None:
        self.handler._stop_heartbeats()  # the agent's process is gone: no keep-alives, no connection
        self.close()

    def close(self) -> None:
        if getattr(self, "handler", None) is not None:
            self.handler._stop_heartbeats()
        self.handler = None
        self.store = None


class Heartbeats:
    """One worker's heartbeat loop for its replica groups: each live one heartbeats every
    ``interval_s`` (a torchft Manager does so from its own thread; one loop a process
    keeps the thread ids a participant needs to what the client itself starts)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.live: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True, name="scale-heartbeats").start()

    def add(self, replica_id: str, client: Any) -> None:
        with self.lock:
            self.live[replica_id] = client

    def remove(self, replica_id: str) -> None:
        with self.lock:
            self.live.pop(replica_id, None)

    def _run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            with self.lock:
                live = list(self.live.items())
            for rid, client in live:
                try:
                    client.heartbeat(rid)
                except Exception:
                    continue  # a lighthouse going away at the end of a point
            self.stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))


HEARTBEATS: list[Heartbeats] = []
PER_HEARTBEAT_LOOP = 128
"""Replica groups one heartbeat loop serves: a heartbeat takes about a millisecond, so a
loop of 128 stays well inside a second even on loaded cores, and no live group ages
past the lighthouse's timeout because its loop was slow."""
_LIVE: set[int] = set()
_HEARTBEATS_LOCK = threading.Lock()


class ReplicaGroup(Participant):
    """A torchft replica group as the lighthouse sees it: a ``LighthouseClient`` that
    heartbeats and asks for a quorum (what each group's ManagerServer does)."""

    def setup(self) -> None:
        from torchft._torchft import LighthouseClient

        with _HEARTBEATS_LOCK:
            if len(HEARTBEATS) * PER_HEARTBEAT_LOOP <= len(_LIVE):
                HEARTBEATS.append(Heartbeats(float(self.ctx.knobs["lh_heartbeat_ms"]) / 1e3))
            self.loop = HEARTBEATS[len(_LIVE) // PER_HEARTBEAT_LOOP]
            _LIVE.add(id(self))
        self.rid = f"rep{self.ctx.rep}_group{self.index}"
        try:
            self.lh: Any = LighthouseClient(self.ctx.address, datetime.timedelta(seconds=self.ctx.deadline_s))
        except Exception as err:
            raise RuntimeError(f"LighthouseClient: {err}") from err
        try:
            self.lh.heartbeat(self.rid)
        except Exception as err:
            raise RuntimeError(f"first heartbeat: {err}") from err
        self.loop.add(self.rid, self.lh)

    def run(self, op: str) -> None:
        quorum = self.lh.quorum(replica_id=self.rid, timeout=self.ctx.timeout)
        got = {p.replica_id for p in quorum.participants}
        want = self.ctx.n - (1 if op == "failover" else 0)
        if len(got) != want or self.rid not in got:
            raise RuntimeError(f"a quorum of {len(got)} replica groups, not {want}")

    def kill(self) -> None:
        self.loop.remove(self.rid)

    def close(self) -> None:
        if getattr(self, "loop", None) is not None:
            self.loop.remove(self.rid)
        with _HEARTBEATS_LOCK:
            _LIVE.discard(id(self))
        self.lh = None


class NVRxRank(Participant):
    """A rank under NVRx's in-process Wrapper: its store (``inprocess.store.TCPStore``, a
    ``StoreMixin``) and the barriers and rank assignment the Wrapper runs on it."""

    def setup(self) -> None:
        from nvidia_resiliency_ext.inprocess.store import TCPStore

        # NVRx's store is a server on RANK 0 and a client elsewhere: the worker sets RANK=1.
        self.base: Any = TCPStore(
            host_name=self.ctx.host,
            port=self.ctx.port,
            world_size=self.ctx.n,
            timeout=self.ctx.timeout,
            wait_for_workers=False,
        )

    def run(self, op: str) -> None:
        from nvidia_resiliency_ext.inprocess import rank_assignment as ra
        from nvidia_resiliency_ext.inprocess.attribution import Interruption, InterruptionRecord
        from nvidia_resiliency_ext.inprocess.compose import Compose
        from nvidia_resiliency_ext.inprocess.state import State
        from nvidia_resiliency_ext.inprocess.store import PrefixStore

        n, i, timeout = self.ctx.n, self.index, self.ctx.timeout
        state = State(rank=i, world_size=n)
        if op == "barrier":
            self.base.initial_barrier(ranks=[i], rendezvous_count=n, timeout=timeout)
        elif op == "restart":
            store = PrefixStore(1, self.base)
            if i == self.ctx.victim:
                # What the dead rank's monitor process does for it (monitor_process.py).
                store.record_interrupted([InterruptionRecord(i, Interruption.TERMINATED)])
                store.record_terminated_ranks([i])
                store.iteration_barrier(ranks=[i], rendezvous_count=n, timeout=timeout)
                return
            store.iteration_barrier(ranks=[i], rendezvous_count=n, timeout=timeout)
            terminated = store.get_terminated_ranks()
            ctx = Compose(ra.ActivateAllRanks(), ra.ShiftRanks())(ra.RankAssignmentCtx(state, store, terminated))
            if ctx.state.world_size != n - 1:
                raise RuntimeError(f"a world of {ctx.state.world_size} after the restart, not {n - 1}")
        elif op == "tree":
            per_host = int(self.ctx.knobs.get("ranks_per_host", 8))
            tree = ra.Tree(
                [
                    ra.Layer(min_ranks=1, max_ranks=n, key_or_fn="root", flag=ra.LayerFlag.RESERVE),
                    ra.Layer(min_ranks=1, max_ranks=per_host, key_or_fn=lambda s: s.rank // per_host),
                ]
            )
            ctx = tree(ra.RankAssignmentCtx(state, PrefixStore(2, self.base), set()))
            if ctx.state.active_world_size != n:
                raise RuntimeError(f"{ctx.state.active_world_size} active ranks, not {n}")
        else:
            raise ValueError(op)

    def close(self) -> None:
        self.base = None


class Member(Participant):
    """A rank of reinit or torch-reconfigure: ftbench's :class:`Membership` on the job's
    store, as the strategies run it, and a second client for the abort watch (as
    ``bench.rank.abortable.Watch``). Its victim is reported dead as the supervisor
    reports a reaped rank."""

    worlds: ClassVar[dict[int, tuple[tuple[int, ...], tuple[int, ...]]]] = {}
    """Per point size: every member, and every member but the victim (one tuple for all
    the participants of a process: building N of them in N threads is O(N²) work of the
    harness's own)."""

    @staticmethod
    def handle(index: int, size: int) -> str:
        """Member ``index``'s stand-in reconfigure handle, ``size`` bytes, its id first."""
        return f"{index:08d}".ljust(size, "h")

    def setup(self) -> None:
        from bench.rank.membership import Membership
        from bench.rank.relay import local_address

        self.store: Any = self.client()
        self.watch: Any = self.client()
        window = float(self.ctx.knobs.get("join_window_s", 0.5))
        self.membership = Membership(
            self.store,
            me=self.index,
            join_window_s=window,
            timeout_s=self.ctx.deadline_s,
            relay_host=local_address(self.ctx.host),
        )

    def _worlds(self) -> tuple[Any, Any]:
        from bench.rank.policy import World

        n = self.ctx.n
        if n not in self.worlds:
            everyone = tuple(range(n))
            self.worlds[n] = everyone, everyone[: self.ctx.victim] + everyone[self.ctx.victim + 1 :]
        everyone, survivors = self.worlds[n]
        return World(gen=0, members=everyone, me=self.index), World(gen=1, members=survivors, me=self.index)

    def run(self, op: str) -> None:
        from bench.rank.membership import Left

        m = self.membership
        first, second = self._worlds()
        if op == "abort":
            if self.index == 0:
                m.report_failure(0, "scale", "posted by member 0")
            key = m.abort_key(0)
            self.watch.wait([key], self.ctx.timeout)
            self.watch.get(key)
        elif op == "agree":
            m.report_failure(0, "scale", "a member died")
            nxt = m.next_world(first)
            # Every member but the victim is alive: the next world must hold each of them.
            if isinstance(nxt, Left):
                raise RuntimeError(f"live member {self.index} left out of the next world ({nxt.why})")
            if nxt.members != second.members:
                lost = sorted(set(second.members) - set(nxt.members))[:5]
                raise RuntimeError(f"a next world of {nxt.size}, not {second.size}: live members {lost} left out")
        elif op == "resume":
            resume, _ = m.agree_on_step(second, 100)
            if resume != 101:
                raise RuntimeError(f"resume after {resume - 1}, not 100")
        elif op == "handles":
            size = int(self.ctx.knobs.get("handle_bytes", 32))
            handles = m.exchange_handles(second, self.handle(self.index, size), self.ctx.timeout)
            if len(handles) != second.size:
                raise RuntimeError(f"{len(handles)} handles, not {second.size}")
            # Every member's handle in rank order: checked at a spread of places (all of
            # them would be N² work of the harness's own at 16K members).
            places = {0, second.size - 1, second.group_rank, *(self.index * k % second.size for k in (3, 7, 31))}
            wrong = [p for p in sorted(places) if handles[p] != self.handle(second.members[p], size)]
            if wrong:
                raise RuntimeError(f"wrong handles at group ranks {wrong[:5]}")
        else:
            raise ValueError(op)

    def kill(self) -> None:
        from bench.rank.deaths import report_death

        report_death(self.store, self.index, -9)  # as the supervisor reports a SIGKILLed rank it reaped
        self.close()

    def close(self) -> None:
        self.store = self.watch = None
