"""Membership of an in-process-recovering job: who is in the next generation's group.

The protocol runs over the c10d store that the launcher hosts (it outlives any rank).
Every member knows the world of its generation (ids in group-rank order); each step below
costs a member O(1) requests, whatever N, and the store O(N) bytes (O(N log N) for the
handles), which ``ftbench scale`` measures (coordinator ``membership``):

1. **abort**: a rank whose collective fails publishes ``g<gen>/abort`` (first writer
   wins). Every rank of the generation watches that key (``abortable.py``) and stops
   waiting on its collectives at once: nobody sits in a process-group timeout because a
   peer two hops away died. Each rank waits on a store connection of its own (a
   blocking wait holds it): two connections a rank. Relayed through the members
   instead, a stalled relay would hold its subtree's abort until their own timeouts,
   and the agreement would then take those live members for stalled ones.
2. **agree**: each survivor checks in: it appends its id to ``g<gen>/here``, then counts
   itself in ``g<gen>/nhere``. The first to count itself decides and says so
   (``g<gen>/decider``); the second stands by, and decides in its place if the launcher
   reports the decider dead (or it never said who it is), which is how a second death
   during the agreement, the decider's own included, ends in a decision rather than a
   timeout (``compare_set`` keeps the first decision published). The standby does not
   decide beside a live decider: where members are threads of one process (``ftbench
   scale``) a second decision woke every member while the first decider still polled,
   and their fight for the interpreter took 18 s at 4,096 members. The decider polls
   two counters per round (``nhere`` and the launcher's ``ndeaths``,
   :mod:`bench.rank.deaths`) and reads who is here and who died only when a count says
   it may be complete. It closes on the count, when every member has checked in or is
   known dead; otherwise when no member has checked in or died for ``join_window_s``
   (a stalled member neither checks in nor dies). That window is silence, not time since
   the start: survivors keep arriving for as long as the abort's fan-out and the store
   take to bring them in, which grows with N, and each arrival restarts it, so no live
   member is cut off by the clock while others are still coming in. The decision
   (``g<gen>/next``) is what changed: the ids removed, each with why (``dead``: the
   launcher reported it; ``silent``: not here when the agreement closed) and the ids
   added; each member applies it to the world it knows, reading O(deaths) bytes. The
   whole next world is written once more (``g<gen>/world``) for joiners, who know none.
3. A member that finds itself removed (a stalled rank that woke up late) is told why.
   Where the job takes joiners (``regrow``) it rejoins the running world at its next
   step boundary, as a replacement would, taking its state from a peer; otherwise it
   records that it was left out and exits cleanly. Nobody is dropped without knowing it.
4. **resume**: every member but the new group's rank 0 writes the step it committed;
   rank 0 reads them all with one ``multi_get`` and writes the decision (resume after
   the smallest committed step, from the state of a member that committed exactly it)
   once; the others wait for that one key.
5. **handles** (torch-reconfigure): every member but rank 0 writes its reconfigure
   handle; rank 0 gathers them with one ``multi_get`` and writes them as one value.
   Every member needs every peer's handle, so O(N²) bytes must move in all whatever the
   protocol; the root's few children read that value from the store and every other
   member from a peer that has it (:mod:`bench.rank.relay`), so the store sends O(N log N).

Growing back (``regrow``): a replacement process registers as a joiner of the current
generation (``g<gen>/joinerN``) and wakes the group's rank 0 (``g<gen>/join``, watched by
a thread). Rank 0 announces ``g<gen>/grow_at = s + 1`` when it ends step ``s``. Every
member reads ``grow_at`` from the store when it ends a step (one round trip per step,
paid only with ``regrow``), and is sure to see it by the end of step ``s + 1``: ranks
are in lockstep, nobody ends ``s + 1`` without rank 0's part of it, which rank 0 starts
after announcing. So all re-form the group, joiners included, right after committing
step ``s + 1``, and the joiner takes its state from a member. A joiner left out by a
failure reconfiguration tries again in the next generation.

If both deciding members die during the agreement, or rank 0 during the resume or
handle exchange, the others give up at their wait deadline, and the trial shows that as
a failure, not a hang.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.rank import relay
from bench.rank.deaths import DEATH_COUNT, DEATHS, dead_key
from bench.rank.policy import World

GENERATION_OVER = "ftbench-generation-over"
"""What a generation's abort key holds when it ended without a failure (it grew, or
training ended): its watcher wakes, aborts nothing and lets go of the store connection
the next generation's watcher waits on."""

POLL_S = 0.002
"""The decider's poll (two counters) and the standby's (the decision, the decider's
death): the store serves about 2,000 requests a second for them whatever N (before: 2N
checks a poll)."""


@dataclass(frozen=True, slots=True)
class Left:
    """This rank is not in the world after generation ``gen``, and why."""

    gen: int
    why: str
    """``silent``: it had not checked in when the agreement closed (it arrived late);
    ``dead``: the launcher reported it dead."""


class Membership:
    def __init__(
        self,
        store: Any,
        *,
        me: int,
        join_window_s: float,
        timeout_s: float,
        relay_host: str = "127.0.0.1",
        fanout: int = relay.FANOUT,
    ) -> None:
        self.store = store
        self.me = me
        self.join_window_s = join_window_s
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.relay_host = relay_host
        """Where this member serves the handles to its children (on the route to the store)."""
        self.fanout = fanout

    @staticmethod
    def abort_key(gen: int) -> str:
        return f"g{gen}/abort"

    def report_failure(self, gen: int, how: str, message: str) -> None:
        """Tell every member of ``gen`` to stop waiting (keeps the first report)."""
        reason = json.dumps({"by": self.me, "how": how, "error": message[:200]})
        self.store.compare_set(self.abort_key(gen), "", reason)

    # --- agree --------------------------------------------------------------------

    def next_world(self, world: World) -> World | Left:
        """Agree on the next generation; :class:`Left` if this rank is not in it."""
        g = world.gen
        self.store.append(f"g{g}/here", f"{self.me} ")
        order = self.store.add(f"g{g}/nhere", 1)
        if order == 1:
            self.store.set(f"g{g}/decider", str(self.me))
            self._decide(world)
        elif order == 2 and self._stand_by(world):
            self._decide(world)
        return self._apply(world, self._read(f"g{g}/next", self.timeout))

    def _stand_by(self, world: World) -> bool:
        """Until the decision is out: True if this member must decide instead, because
        the launcher reported the decider dead, or, before the decider said who it is, a
        member that had checked in (perhaps the decider)."""
        g, members = world.gen, frozenset(world.members)
        deadline = time.monotonic() + self.timeout.total_seconds()
        decider: int | None = None
        deaths = 0
        while time.monotonic() < deadline:
            if self.store.check([f"g{g}/next"]):
                return False
            if decider is None and self.store.check([f"g{g}/decider"]):
                decider = int(self.store.get(f"g{g}/decider"))
            if decider is not None:
                if self.store.check([dead_key(decider)]):
                    return True
            elif (count := self.store.add(DEATH_COUNT, 0)) != deaths:
                deaths = count
                here = {int(m) for m in self.store.get(f"g{g}/here").split()}
                if self._dead_among(members & here):
                    return True
            time.sleep(POLL_S)  # the standby is a member too: it waits for the decision as fast as the others
        return False  # the members' own wait for the decision times out too

    def _decide(self, world: World) -> None:
        g, members = world.gen, frozenset(world.members)
        window = self.join_window_s
        started = time.monotonic()
        quiet_until, hard = started + window, started + self.timeout.total_seconds()
        counts, read_at = (-1, -1), -1
        here: set[int] = set()
        dead: set[int] = set()
        while True:
            nhere, ndead = self.store.add(f"g{g}/nhere", 0), self.store.add(DEATH_COUNT, 0)
            now = time.monotonic()
            if (nhere, ndead) != counts:
                quiet_until = now + window  # an arrival or a death: the silence starts again
                if ndead != counts[1] and ndead > 0:
                    dead |= self._dead_among(members - dead)
                counts = (nhere, ndead)
            closing = now >= quiet_until or now >= hard
            if closing or (nhere != read_at and nhere + len(dead) >= len(members)):
                here, read_at = {int(m) for m in self.store.get(f"g{g}/here").split()} & members, nhere
                if closing or members <= here | dead:
                    break
            time.sleep(POLL_S)
        removed = [(m, "dead" if m in dead else "silent") for m in world.members if m in dead or m not in here]
        self._publish(world, removed=removed)

    def _dead_among(self, candidates: frozenset[int]) -> set[int]:
        """Which of ``candidates`` the launcher reported dead (this incarnation)."""
        logged = {int(m) for m in self.store.get(DEATHS).split()}
        return {m for m in logged & candidates if self.store.check([dead_key(m)])}

    def _publish(self, world: World, *, removed: Sequence[tuple[int, str]] = (), added: Sequence[int] = ()) -> None:
        g = world.gen
        change = json.dumps({"removed": list(removed), "added": list(added)})
        if self.store.compare_set(f"g{g}/next", "", change) != change.encode():
            return  # the other decider's change is the decision
        members, _ = changed(world.members, change.encode())
        self.store.set(f"g{g}/world", json.dumps(members))
        self.store.set("current_gen", str(g + 1))
        # Release this generation's watchers that wait for joins that will never come, and
        # its abort watchers where it ended without a failure (a failure set the key
        # already): a watcher still waiting would hold the connection the next
        # generation's watcher needs, which then learns of a failure at the timeout.
        self.store.compare_set(f"g{g}/join", "", "closed")
        self.store.compare_set(f"g{g}/grow_at", "", "-1")
        self.store.compare_set(self.abort_key(g), "", GENERATION_OVER)

    def _apply(self, world: World, change: bytes) -> World | Left:
        members, gone = changed(world.members, change)
        if self.me in gone:
            return Left(gen=world.gen, why=gone[self.me])
        return World(gen=world.gen + 1, members=members, me=self.me)

    def _read(self, key: str, timeout: datetime.timedelta) -> bytes:
        self.store.wait([key], timeout)
        return bytes(self.store.get(key))

    def _gather(self, keys: list[str], timeout: datetime.timedelta) -> list[bytes]:
        if not keys:
            return []
        self.store.wait(keys, timeout)
        return list(self.store.multi_get(keys))

    # --- resume and handles ---------------------------------------------------------

    def agree_on_step(self, world: World, committed: int) -> tuple[int, int]:
        """Return ``(resume_step, source_group_rank)``: everyone resumes after the
        smallest committed step, from the state of a member that committed exactly it
        (-1: nobody needs one). A joiner reports ``committed = -1`` (it has no state)
        and always needs one."""
        g = world.gen
        if world.group_rank != 0:
            self.store.set(f"g{g}/committed/{self.me}", str(committed))
            decided = self._read(f"g{g}/resume", self.timeout).split()
            return int(decided[0]), int(decided[1])
        others = self._gather([f"g{g}/committed/{m}" for m in world.members[1:]], self.timeout)
        steps = [committed, *(int(s) for s in others)]
        low = min(s for s in steps if s >= 0)
        source = steps.index(low) if len(set(steps)) > 1 else -1
        self.store.set(f"g{g}/resume", f"{low + 1} {source}")
        return low + 1, source

    def exchange_handles(self, world: World, handle: str | bytes, timeout: datetime.timedelta) -> list[str]:
        """Every member's reconfigure handle for ``world``, in the order that assigns the
        ranks (``dist._reconfigure`` takes them so): rank 0 gathers them into one value,
        which reaches every member through the store or a relay (module docstring)."""
        g, rank, size = world.gen, world.group_rank, world.size
        seconds = timeout.total_seconds()
        if rank == 0:
            mine = handle.decode() if isinstance(handle, bytes) else handle
            others = self._gather([f"g{g}/handle/{m}" for m in world.members[1:]], timeout)
            value = json.dumps([mine, *(h.decode() for h in others)]).encode()
            self.store.set(f"g{g}/handles", value)
        else:
            self.store.set(f"g{g}/handle/{self.me}", handle)
            up = relay.parent(rank, self.fanout)
            if up == 0:
                value = self._read(f"g{g}/handles", timeout)
            else:
                value = relay.fetch(self._read(f"g{g}/relay/{up}", timeout).decode(), seconds)
            below = relay.children(rank, self.fanout, size)
            if below:
                server = relay.Relay(self.relay_host, value, len(below), seconds)
                self.store.set(f"g{g}/relay/{rank}", server.address)
        handles = decoded(value)
        if len(handles) != size:
            raise RuntimeError(f"{len(handles)} handles for a world of {size}")
        return handles

    # --- growing back -------------------------------------------------------------

    def request_join(self) -> int:
        """Register as a joiner of the current generation; returns that generation."""
        g = int(self.store.get("current_gen")) if self.store.check(["current_gen"]) else 0
        index = self.store.add(f"g{g}/njoin", 1)
        self.store.set(f"g{g}/joiner{index}", str(self.me))
        self.store.compare_set(f"g{g}/join", "", "pending")
        return g

    def admitted(self, g: int) -> World | None:
        """Wait for generation ``g`` to end; the next world if it includes this joiner
        (which knows no world before it, so reads the whole one)."""
        members = tuple(int(m) for m in json.loads(self._read(f"g{g}/world", self.timeout)))
        return World(gen=g + 1, members=members, me=self.me) if self.me in members else None

    def announce_growth(self, world: World, after_step: int) -> None:
        """Rank 0: everyone re-forms the group, joiners included, after ``after_step``."""
        self.store.compare_set(f"g{world.gen}/grow_at", "", str(after_step))

    def close(self, world: World) -> None:
        """Rank 0 at the end of training: no generation follows this one."""
        self.store.set("done", "1")
        self._publish(world)

    def finished(self) -> bool:
        return bool(self.store.check(["done"]))

    def growth_step(self, world: World) -> int | None:
        """The step after which the group grows, once rank 0 announced one."""
        key = f"g{world.gen}/grow_at"
        if not self.store.check([key]):
            return None
        step = int(self.store.get(key))
        return step if step >= 0 else None

    def grow(self, world: World) -> World | Left:
        """Every member, after committing the announced step: the next, larger world
        (:class:`Left` if a failure decision left this rank out in the meantime)."""
        g = world.gen
        if world.group_rank == 0:
            count = self.store.add(f"g{g}/njoin", 0)
            joiners = [int(j) for j in self._gather([f"g{g}/joiner{i}" for i in range(1, count + 1)], self.timeout)]
            for j in joiners:
                self.store.delete_key(dead_key(j))  # the id lives again, in a new process
            self._publish(world, added=[j for j in dict.fromkeys(joiners) if j not in world.members])
        return self._apply(world, self._read(f"g{g}/next", self.timeout))


_HANDLES: list[tuple[bytes, list[str]]] = []
"""The last aggregate of handles decoded in this process."""


def decoded(value: bytes) -> list[str]:
    """The handles in an aggregate, a list of this member's own.

    Decoding N handles is O(N) per member, in parallel on a cluster (2 ms at 16,384
    members); members that are threads of one process (``ftbench scale``) decode the
    same value behind one interpreter lock, N times over. So the last value's handles
    are kept, and each member gets a copy of them (a copy of N references, in C)."""
    if not _HANDLES or _HANDLES[-1][0] != value:
        _HANDLES[:] = [(value, list(json.loads(value)))]
    return list(_HANDLES[-1][1])


_LAST: list[tuple[tuple[int, ...], bytes, tuple[int, ...], dict[int, str]]] = []
"""The last change applied in this process, with its world before and after."""


def changed(members: tuple[int, ...], change: bytes) -> tuple[tuple[int, ...], dict[int, str]]:
    """``members`` as a published change leaves them, and the ids it removed with why.

    A rank applies each change once, to its own world: a copy of O(N) in C (0.14 ms at
    4,096 members). Members that are threads of one process (``ftbench scale``) apply the
    same change to the same world, and 4,095 copies behind one interpreter lock took 7 s
    where a cluster's ranks take 0.14 ms in parallel: so the last result is kept and
    given again for the same world object and change."""
    last = _LAST[-1] if _LAST else None
    if last is not None and last[0] is members and last[1] == change:
        return last[2], dict(last[3])
    data = json.loads(change)
    gone = {int(m): str(why) for m, why in data["removed"]}
    kept = members
    for cut in sorted((kept.index(m) for m in gone if m in kept), reverse=True):
        kept = kept[:cut] + kept[cut + 1 :]  # slices: O(N) in C, not a Python loop over N
    result = kept + tuple(int(m) for m in data["added"])
    _LAST[:] = [(members, change, result, gone)]
    return result, dict(gone)
