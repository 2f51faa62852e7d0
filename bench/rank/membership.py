"""Membership of an in-process-recovering job: who is in the next generation's group.

The protocol runs over the c10d store that the launcher hosts (it outlives any rank):

1. A rank whose collective fails publishes ``g<gen>/abort`` (first writer wins). Every
   rank of the generation watches that key (``collectives.py``) and stops waiting
   on its collectives at once: nobody sits in a process-group timeout because a peer two
   hops away died.
2. Each survivor checks in (``g<gen>/here/<id>``). The first to check in coordinates: it
   waits until every member has either checked in or is known dead (the supervisor
   writes ``dead/<id>`` when it reaps a process), or until ``join_window_s`` has passed
   (a stalled member neither checks in nor dies), then publishes ``g<gen>/next``.
3. Members of the next generation form a new process group on a fresh store prefix.
   A member that finds itself left out (a stalled rank that woke up late) is *evicted*:
   it records that and exits cleanly; the job goes on without it.

Growing back (``regrow``): a replacement process registers as a joiner of the current
generation (``g<gen>/joinerN``) and wakes the group's rank 0 (``g<gen>/join``, watched by
a thread). Rank 0 announces ``g<gen>/grow_at = s + 1`` when it ends step ``s``. Every
member reads ``grow_at`` from the store when it ends a step (one round trip per step,
paid only with ``regrow``), and is sure to see it by the end of step ``s + 1``: ranks
are in lockstep, nobody ends ``s + 1`` without rank 0's part of it, which rank 0 starts
after announcing. So all re-form the group, joiners included, right after committing
step ``s + 1``, and the joiner takes its state from a member. A joiner left out by a
failure reconfiguration tries again in the next generation.

The coordinator is not itself fault tolerant: if it dies mid-decision the others give
up after their wait deadline, and the trial shows that as a failure, not a hang.
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

from bench.rank.policy import World


class Membership:
    def __init__(self, store: Any, *, me: int, join_window_s: float, timeout_s: float) -> None:
        self.store = store
        self.me = me
        self.join_window_s = join_window_s
        self.timeout = datetime.timedelta(seconds=timeout_s)

    @staticmethod
    def abort_key(gen: int) -> str:
        return f"g{gen}/abort"

    def report_failure(self, gen: int, how: str, message: str) -> None:
        """Tell every member of ``gen`` to stop waiting (keeps the first report)."""
        reason = json.dumps({"by": self.me, "how": how, "error": message[:200]})
        self.store.compare_set(self.abort_key(gen), "", reason)

    def next_world(self, world: World) -> World | None:
        """Agree on the next generation; ``None`` if this rank was left out."""
        g = world.gen
        self.store.set(f"g{g}/here/{self.me}", str(time.monotonic_ns()))
        if self.store.add(f"g{g}/coordinator", 1) == 1:
            self._decide(world)
        self.store.wait([f"g{g}/next"], self.timeout)
        members = tuple(json.loads(self.store.get(f"g{g}/next")))
        if self.me not in members:
            return None
        return World(gen=g + 1, members=members, me=self.me)

    def _decide(self, world: World) -> None:
        g = world.gen
        deadline = time.monotonic() + self.join_window_s
        while True:
            here = [m for m in world.members if self.store.check([f"g{g}/here/{m}"])]
            dead = [m for m in world.members if m not in here and self.store.check([f"dead/{m}"])]
            if len(here) + len(dead) == len(world.members) or time.monotonic() >= deadline:
                break
            time.sleep(0.002)
        self._publish(g, sorted(here))

    def _publish(self, g: int, members: list[int]) -> None:
        self.store.set(f"g{g}/next", json.dumps(members))
        self.store.set("current_gen", str(g + 1))
        # Release this generation's watchers that wait for joins that will never come.
        self.store.compare_set(f"g{g}/join", "", "closed")
        self.store.compare_set(f"g{g}/grow_at", "", "-1")

    def agree_on_step(self, world: World, committed: int) -> tuple[int, int]:
        """Return ``(resume_step, source_group_rank)``: everyone resumes after the
        smallest committed step, from the state of a member that committed exactly it.
        A joiner reports ``committed = -1`` (it has no state) and always needs one."""
        g = world.gen
        self.store.set(f"g{g}/committed/{self.me}", str(committed))
        keys = [f"g{g}/committed/{m}" for m in world.members]
        self.store.wait(keys, self.timeout)
        steps = [int(self.store.get(k)) for k in keys]
        low = min(s for s in steps if s >= 0)
        return low + 1, steps.index(low) if len(set(steps)) > 1 else -1

    def exchange_handles(self, world: World, handle: str | bytes, timeout: datetime.timedelta) -> list[str]:
        """Publish this rank's reconfigure handle for ``world`` and read every member's,
        in the order that assigns the ranks (``dist._reconfigure`` takes them so): one set,
        one wait for all, then one get per member (torch-reconfigure's exchange; its
        cost at scale is measured by ``ftbench scale``)."""
        g = world.gen
        self.store.set(f"g{g}/handle/{self.me}", handle)
        keys = [f"g{g}/handle/{m}" for m in world.members]
        self.store.wait(keys, timeout)
        return [self.store.get(k).decode() for k in keys]

    # --- growing back -------------------------------------------------------------

    def request_join(self) -> int:
        """Register as a joiner of the current generation; returns that generation."""
        g = int(self.store.get("current_gen")) if self.store.check(["current_gen"]) else 0
        index = self.store.add(f"g{g}/njoin", 1)
        self.store.set(f"g{g}/joiner{index}", str(self.me))
        self.store.compare_set(f"g{g}/join", "", "pending")
        return g

    def admitted(self, g: int) -> World | None:
        """Wait for generation ``g`` to end; the next world if it includes this joiner."""
        self.store.wait([f"g{g}/next"], self.timeout)
        members = tuple(json.loads(self.store.get(f"g{g}/next")))
        return World(gen=g + 1, members=members, me=self.me) if self.me in members else None

    def announce_growth(self, world: World, after_step: int) -> None:
        """Rank 0: everyone re-forms the group, joiners included, after ``after_step``."""
        self.store.compare_set(f"g{world.gen}/grow_at", "", str(after_step))

    def close(self, world: World) -> None:
        """Rank 0 at the end of training: no generation follows this one."""
        self.store.set("done", "1")
        self._publish(world.gen, list(world.members))

    def finished(self) -> bool:
        return bool(self.store.check(["done"]))

    def growth_step(self, world: World) -> int | None:
        """The step after which the group grows, once rank 0 announced one."""
        key = f"g{world.gen}/grow_at"
        if not self.store.check([key]):
            return None
        step = int(self.store.get(key))
        return step if step >= 0 else None

    def grow(self, world: World) -> World | None:
        """Every member, after committing the announced step: the next, larger world
        (``None`` if a failure decision left this rank out in the meantime)."""
        g = world.gen
        if world.group_rank == 0:
            count = self.store.add(f"g{g}/njoin", 0)
            joiners = [int(self.store.get(f"g{g}/joiner{i}")) for i in range(1, count + 1)]
            for j in joiners:
                self.store.delete_key(f"dead/{j}")  # the id lives again, in a new process
            self._publish(g, list(world.members) + [j for j in joiners if j not in world.members])
        return self.admitted(g)
