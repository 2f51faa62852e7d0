"""Membership of an in-process-recovering job: who is in the next generation's group.

The protocol runs over the c10d store that the launcher hosts (it outlives any rank):

1. A rank whose collective fails publishes ``g<gen>/abort`` (first writer wins). Every
   rank of the generation watches that key (:class:`bench.comm.Comm`) and stops waiting
   on its collectives at once: nobody sits in a process-group timeout because a peer two
   hops away died.
2. Each survivor checks in (``g<gen>/here/<id>``). The first to check in coordinates: it
   waits until every member has either checked in or is known dead (the launcher's agent
   writes ``dead/<id>`` when it reaps a process), or until ``join_window_s`` has passed
   (a stalled member neither checks in nor dies), then publishes ``g<gen>/next``.
3. Members of the next generation form a new process group on a fresh store prefix.
   A member that finds itself left out (a stalled rank that woke up late) is *evicted*:
   it records that and exits cleanly; the job goes on without it.

The coordinator is not itself fault tolerant: if it dies mid-decision the others give
up after their wait deadline, and the trial shows that as a failure, not a hang.
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class World:
    gen: int
    members: tuple[int, ...]
    """Stable ids (launch ranks) in group-rank order."""
    me: int

    @property
    def group_rank(self) -> int:
        return self.members.index(self.me)

    @property
    def size(self) -> int:
        return len(self.members)


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
        self.store.set(f"g{g}/next", json.dumps(sorted(here)))

    def agree_on_step(self, world: World, committed: int) -> tuple[int, int]:
        """Return ``(resume_step, source_group_rank)``: everyone resumes after the
        smallest committed step, from the state of a member that committed exactly it."""
        g = world.gen
        self.store.set(f"g{g}/committed/{self.me}", str(committed))
        keys = [f"g{g}/committed/{m}" for m in world.members]
        self.store.wait(keys, self.timeout)
        steps = [int(self.store.get(k)) for k in keys]
        low = min(steps)
        return low + 1, steps.index(low) if len(set(steps)) > 1 else -1
