"""What every strategy that runs a torchelastic-style launcher shares (torchrun for
``restart``, NVRx's ``ft_launcher`` for ``nvrx-launcher``).

Both launchers are the same shape: one agent process per node that starts fresh worker
interpreters, watches them, and tears the group down and re-rendezvouses on a failure.
ftbench runs the launcher's own ``main`` and its own agent class, and only observes it:

- :func:`bench.probe.site.ftbench_probe_agents.instrument_agent` wraps four lifecycle methods
  of the agent class so that each records an event before or after calling the
  original (``detect`` by the agent's monitor, ``teardown_*``, ``rendezvous_*``,
  ``workers_started``); the agent's behaviour is unchanged. The probe does the same to
  a command job's own torchrun or ``ft_launcher``, so both read alike.
- :func:`agent_main` is the body of the instrumented agent process
  (``python -m <module> EVENTS_DIR -- <launcher args>``).
- :class:`ElasticJob` is the harness side: it writes the rank spec the workers read,
  starts the agent (inside the trial's private network namespace where there is one:
  both launchers' stores listen on every interface), and reaps it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.jobs.job import Job, host_launcher, rank_spec
from bench.procs.events import EventWriter
from bench.procs.hygiene import marked_pids, set_pdeathsig
from bench.procs.store import free_port
from bench.rank.entry import spec_to_json
from injectors.link.netns import enter

ELASTIC_PORT = 29400
"""torchrun's default rendezvous port: free in a trial's fresh host namespaces."""


def agent_main(argv: list[str], usage: str, run: Callable[[EventWriter, list[str]], None]) -> None:
    """Body of an instrumented agent process: ``EVENTS_DIR -- LAUNCHER_ARGS...``.

    ``run(events, launcher_args)`` instruments the launcher's classes and calls its main.
    The agent dies with the harness; its workers do not (whether they outlive a dead
    agent is part of the behaviour under test, and the guard sweeps them)."""
    set_pdeathsig()
    events_dir, sep, *launcher_args = argv
    if sep != "--":
        raise SystemExit(f"usage: {usage}")
    events = EventWriter(Path(events_dir) / f"agent-{os.getpid()}.jsonl", src="agent", pid=os.getpid())
    events.emit("proc_start", role="agent")
    run(events, launcher_args)


class ElasticJob(Job):
    """One instrumented launcher agent per trial, its workers running ``bench.rank.entry``."""

    agent_module: str
    """The instrumented agent: ``python -m <agent_module> EVENTS_DIR -- ARGS``."""
    log_name: str
    """The agent's (and its workers') console output, in the trial's event directory."""

    @abstractmethod
    def launcher_args(self, nproc: int, rdzv_port: int, *, nnodes: int = 1, endpoint: str = "127.0.0.1") -> list[str]:
        """The launcher's own arguments, before the worker command (``nnodes`` agents
        rendezvous at ``endpoint:rdzv_port``)."""

    def agent_env(self) -> dict[str, str]:
        """The agent's environment (workers inherit it)."""
        return dict(os.environ, OMP_NUM_THREADS="1")

    def start(self) -> None:
        ctx = self.ctx
        if ctx.scenario.launch.agents:
            self._start_on_hosts()
            return
        n = ctx.point.scenario.workload.world_size
        spec = rank_spec(
            ctx,
            -1,
            "initial",
            members=tuple(range(n)),
            pdeathsig=False,
            checkpoint_dir=str(ctx.checkpoint_dir),
        )
        spec_path = ctx.trial_dir / f"spec-{ctx.events_dir.name}.json"
        spec_path.write_text(spec_to_json(spec))
        args = [
            sys.executable,
            "-m",
            self.agent_module,
            str(ctx.events_dir),
            "--",
            *self.launcher_args(n, free_port()),
            "-m",
            "bench.rank.entry",
            str(spec_path),
        ]
        self.log = open(ctx.events_dir / self.log_name, "wb")  # noqa: SIM115 (closed by close())
        # The launchers' stores listen on every interface: where the trial has a private
        # network namespace, the agent (and so its workers) start inside it.
        namespace = ctx.store_namespace
        self.proc = subprocess.Popen(
            args,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=self.agent_env(),
            preexec_fn=(lambda: enter(namespace)) if namespace else None,
        )

    def _start_on_hosts(self) -> None:
        """``launch.agents``: one elastic agent per host (``--nnodes`` hosts, c10d
        rendezvous on host h0's address), each started by that host's agent."""
        from bench.hosts.agent import send
        from bench.scenario.strategy import STRATEGIES

        ctx = self.ctx
        s = ctx.scenario
        self.hosts = host_launcher(ctx, start_method="spawn", supervised=True)
        self.hosts.start_store()
        spec = rank_spec(
            ctx,
            -1,
            "initial",
            members=tuple(range(s.workload.world_size)),
            pdeathsig=False,
            netns="",  # the workers start inside their host's namespace already
            checkpoint_dir=str(ctx.checkpoint_dir),
        )
        args = self.launcher_args(
            s.launch.ranks_per_host, ELASTIC_PORT, nnodes=len(self.hosts.hosts), endpoint=self.hosts.addresses[0]
        )
        for h in self.hosts.names():
            env = {k: v for k, v in self.agent_env().items() if os.environ.get(k) != v}
            command = {"op": "elastic", "strategy": STRATEGIES[s.recovery.strategy].name, "args": args, "env": env}
            send(self.hosts.control, self.hosts.sealer, h, command | {"spec": json.loads(spec_to_json(spec))})

    def clocks(self) -> dict[str, dict[str, int]]:
        return dict(self.hosts.clocks) if hasattr(self, "hosts") else {}

    def deliver(self) -> Callable[[str, dict[str, Any]], None] | None:
        return self.hosts.deliver if hasattr(self, "hosts") else None

    def poll(self, timeout_s: float) -> bool:
        """Over when the agent has exited and none of its workers is left: workers
        outlive a killed agent (docs/facts.md), and what they do then is part of the trial.
        With host agents: when every host's elastic agent has exited (or its host agent)."""
        if hasattr(self, "hosts"):
            h = self.hosts
            done = all(h.reported(n, "elastic_exit") or h.agents[n].poll() is not None for n in h.names())
            if not done:
                time.sleep(timeout_s)
            return done
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        host = self.ctx.host
        return not (set(marked_pids(host.run_id)) - host.infrastructure())

    def close(self) -> None:
        if hasattr(self, "hosts"):
            self.hosts.close()  # stops the host agents (their elastic agents with them), sweeps
            return
        self.ctx.host.sweep_trial()  # the agent, its workers, and any worker it orphaned
        if hasattr(self, "proc"):
            self.proc.wait(timeout=30)
            self.log.close()
