"""Ranks started and supervised by ftbench's own launcher (harness side).

:class:`SupervisedJob` is the trial of every strategy whose ranks ftbench starts itself
(forked from the forkserver, each host in its network namespace where link faults need
one): the launcher's store in a process of its own, one process per rank, and the
harness acting as the node agent. It reaps rank processes, records their exits (an
``exit`` detection for a fault exit, where the strategy's stack has such an agent:
``Strategy.supervised``), tells the ranks through the store
(:func:`~bench.rank.deaths.report_death`, so that nobody waits for a member known to be
gone) and starts a replacement when the strategy asks for one
(:meth:`SupervisedJob.replacement_delay`).
Once a rank finished training the job is ending: exits are no longer detections and
nobody is replaced.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

from bench.jobs.job import Job, host_launcher, rank_spec, start_method, zygote_preload
from bench.procs.events import EventWriter
from bench.procs.launcher import LocalLauncher, RankProcess
from bench.rank.deaths import report_death
from bench.rank.entry import EXIT_LEFT, EXIT_OK, RankSpec
from bench.rank.entry import main as rank_process_main
from bench.scenario.strategy import STRATEGIES


class SupervisedJob(Job):
    """Store + N rank processes on this host, with the harness as their supervisor."""

    def start(self) -> None:
        ctx = self.ctx
        self.supervisor = EventWriter(ctx.events_dir / "supervisor.jsonl", src="supervisor", pid=os.getpid())
        self.launcher = self.make_launcher()
        self.launcher.start_store(wait=False)
        self.members = tuple(range(ctx.scenario.workload.world_size))
        self.incarnations: dict[int, int] = dict.fromkeys(self.members, 0)
        self.replacements: dict[int, float] = {}
        """rank -> monotonic time at which its replacement is due."""
        self.finished_at: float | None = None
        """When a rank completed training: the job is ending."""
        if not self.ranks_first:
            self.connect()
        for rank in self.members:
            self.start_rank(rank, "initial")
        if self.ranks_first:
            self.connect()

    ranks_first: ClassVar[bool] = True
    """Start the initial ranks while the store process is still starting (the harness
    bound its socket, so its port is known; a spawned store imports torch for a second
    or more, on the ranks' critical path otherwise), then connect and start the
    services: what ranks read from the store they wait for. False for a job whose
    services or rank starts need the store first."""

    def connect(self) -> None:
        """The harness's own store client, once the store serves, then the services."""
        self.launcher.await_store()
        self.store = self.launcher.store_client()
        self.start_services()

    def make_launcher(self) -> LocalLauncher:
        """The harness's own launcher, or with ``launch.agents`` one that has a host agent
        start each host's ranks (:mod:`bench.hosts.launcher`)."""
        ctx = self.ctx
        where: dict[str, Any] = dict(
            host=ctx.host,
            start_method=start_method(ctx.scenario),
            preload=zygote_preload(ctx.scenario),
            namespace=ctx.store_namespace,
            address=ctx.store_host,
            trial_dir=ctx.trial_dir,
            events_dir=ctx.events_dir,
        )
        if not ctx.scenario.launch.agents:
            return LocalLauncher(**where)
        return host_launcher(
            ctx, start_method=where["start_method"], supervised=STRATEGIES[ctx.scenario.recovery.strategy].supervised
        )

    def clocks(self) -> dict[str, dict[str, int]]:
        return dict(getattr(self.launcher, "clocks", {})) if hasattr(self, "launcher") else {}

    def deliver(self) -> Callable[[str, dict[str, Any]], None] | None:
        deliver: Callable[[str, dict[str, Any]], None] | None = getattr(self.launcher, "deliver", None)
        return deliver

    def start_services(self) -> None:
        """Processes the ranks need besides the store (torchft: the lighthouse)."""

    def spec(self, rank: int, role: str) -> RankSpec:
        """What rank ``rank`` is started with; ``role`` is ``initial`` or ``replacement``."""
        return rank_spec(
            self.ctx,
            rank,
            role,
            members=self.members,
            store_port=self.launcher.store_port,
            private_memory=self.launcher.start_method == "forkserver-private",
        )

    def start_rank(self, rank: int, role: str) -> RankProcess:
        return self.launcher.start_rank(rank, rank_process_main, self.spec(rank, role))

    def replacement_delay(self, rank: int) -> float | None:
        """Seconds after a fault exit of ``rank`` at which to start its replacement, or
        None to start none (the default)."""
        return None

    def poll(self, timeout_s: float) -> bool:
        now = time.monotonic()
        for rank, due in sorted(self.replacements.items()):
            if due <= now:
                del self.replacements[rank]
                if self.finished_at is None and self.launcher.running():
                    self.incarnations[rank] += 1
                    self.supervisor.emit("replacement_started", of_rank=rank, incarnation=self.incarnations[rank])
                    self.start_rank(rank, "replacement")
        if self.replacements:
            timeout_s = max(0.0, min(timeout_s, min(self.replacements.values()) - now))
        for r in self.launcher.wait(timeout_s):
            self.on_exit(r)
        self.on_tick()
        return self.over()

    def on_exit(self, r: RankProcess) -> None:
        code = r.exitcode
        # An exit a host agent saw was recorded there, stamped on that host's clock, and
        # the ranks were told there (report_death): not again here.
        if not r.recorded:
            self.supervisor.emit("proc_exit", of_rank=r.rank, exitcode=code)
        if code == EXIT_OK:
            self.finished_at = self.finished_at or time.monotonic()
            self.replacements.clear()
        elif code != EXIT_LEFT and self.finished_at is None and not self.stopped_by_us(r):
            if STRATEGIES[self.ctx.scenario.recovery.strategy].supervised and not r.recorded:
                self.supervisor.emit("detect", how="exit", of_rank=r.rank, exitcode=code)
            delay = self.replacement_delay(r.rank)
            if delay is not None:
                self.replacements[r.rank] = time.monotonic() + delay
        if not r.recorded and self.launcher.store_process is not None and self.launcher.store_process.is_alive():
            try:  # the store itself may be the fault's target
                report_death(self.store, r.rank, code)
            except Exception:  # it died just now
                pass

    def stopped_by_us(self, r: RankProcess) -> bool:
        """Whether the job itself stopped ``r`` (as an agent stops a failed worker's
        peers): its exit is then neither a detection nor a death to replace."""
        return False

    def on_tick(self) -> None:
        """Called after every poll (torchft: watch the lighthouse, end a finished job)."""

    def over(self) -> bool:
        """Nobody is left: replacements still due are moot (there is nothing to join)."""
        return not self.launcher.running()

    def close(self) -> None:
        if hasattr(self, "launcher"):
            self.launcher.close()  # sweeps every marked process of the trial
        if hasattr(self, "supervisor"):
            self.supervisor.close()


class RegrowingJob(SupervisedJob):
    """The supervised job of an in-process recovery that can grow back (``regrow`` and
    ``regrow_delay_s`` among the strategy's knobs): a replacement for each death, which
    learns the world it joins from the store, not from its spec. A rank the survivors
    left out (it arrived after the agreement closed) needs none: it rejoins in its own
    process (``bench.rank.reform``), and exits cleanly (``EXIT_LEFT``) only when the job
    is over."""

    def spec(self, rank: int, role: str) -> RankSpec:
        spec = super().spec(rank, role)
        return spec if role == "initial" else replace(spec, members=())

    def replacement_delay(self, rank: int) -> float | None:
        params = self.ctx.scenario.recovery.params
        return float(params.regrow_delay_s) if params.regrow else None
