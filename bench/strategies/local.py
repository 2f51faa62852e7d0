"""``failstop`` and ``reinit``: ranks started by the local launcher (harness side).

Both run the training loop of :mod:`bench.train`; they differ only in what a rank does
with its first failed collective:

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
reinit coordinator need not wait for a member that is known to be gone. With
``regrow`` it also starts a replacement for a rank that died, ``regrow_delay_s`` later
(forked like the others: the replacement's start-up is tens of milliseconds).
"""

from __future__ import annotations

import os
import time
from typing import ClassVar

from bench.events import EventWriter
from bench.launch import LocalLauncher
from bench.rank import RankSpec, main as rank_process_main
from bench.strategies.base import Job
from bench.train import EXIT_EVICTED


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
        self.port = self.launcher.start_store()
        self.store = self.launcher.store_client()
        self.members = tuple(range(scenario.workload.world_size))
        self.replacements: dict[int, float] = {}
        """rank -> monotonic time at which its replacement is due."""
        for rank in self.members:
            self._start_rank(rank, role="initial")

    def _start_rank(self, rank: int, *, role: str) -> None:
        ctx = self.ctx
        scenario = ctx.point.scenario
        spec = RankSpec(
            rank=rank, members=self.members if role == "initial" else (), store_port=self.port,
            store_host=ctx.store_host, netns=ctx.namespace_of(rank),
            events_dir=str(ctx.events_dir), entry="bench.train:rank_main", workload=scenario.workload,
            recovery=scenario.recovery, backend=ctx.backend, seed=ctx.seed, wait_s=ctx.deadline_s, role=role,
            faults=() if ctx.fault_free else scenario.faults,
        )
        self.launcher.start_rank(rank, rank_process_main, spec)

    def poll(self, timeout_s: float) -> bool:
        for r in self.launcher.wait(timeout_s):
            code = r.exitcode
            self.agent.emit("proc_exit", of_rank=r.rank, exitcode=code)
            if code not in (0, EXIT_EVICTED):
                self.agent.emit("detect", how="exit", of_rank=r.rank, exitcode=code)
            if self.launcher.store_process.is_alive():  # the store itself may be the fault's target
                try:
                    self.store.set(f"dead/{r.rank}", str(code))
                except Exception:  # it died just now
                    pass
            if code != 0 and self._regrow():
                self.replacements[r.rank] = time.monotonic() + self.ctx.point.scenario.recovery.params.regrow_delay_s
        if not self.launcher.running():
            return True  # nobody left to join: pending replacements are moot
        now = time.monotonic()
        for rank, due in list(self.replacements.items()):
            if now >= due:
                del self.replacements[rank]
                self.agent.emit("replacement_started", of_rank=rank)
                self._start_rank(rank, role="replacement")
        return False

    def _regrow(self) -> bool:
        return self.policy == "reinit" and bool(self.ctx.point.scenario.recovery.params.regrow)

    def close(self) -> None:
        if hasattr(self, "launcher"):
            self.launcher.close()
        if hasattr(self, "agent"):
            self.agent.close()


class FailStop(LocalJob):
    policy = "failstop"


class Reinit(LocalJob):
    policy = "reinit"
