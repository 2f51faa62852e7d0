"""The host agent: ``ftbench host --controller ADDR:PORT --host hN --events-dir DIR``.

One runs on every host of a multi-host trial; the harness stays the one controller
(scenario, schedule, figures). The agent is the harness's hands on its host, and its
clock:

1. It registers through the trial's c10d store (``agent/HOST/hello``) and measures its
   clock's offset to the controller's (:mod:`bench.hosts.clock`), which it posts.
2. It starts the ranks the harness asks for (``agent/HOST/cmd/K``: a rank spec as JSON,
   validated like any spec read from a file: no pickle, code named by the registries
   only), with the same :class:`~bench.procs.launcher.LocalLauncher` and rank entry as
   on one host, and supervises them: it stamps their exits on its own clock
   (``proc_exit``, and ``detect`` ``how=exit`` where the stack has such an agent), tells
   the ranks through the store (``bench.rank.deaths``) and reports each exit to the harness.
3. It carries out the faults aimed at its host's ranks (signals, rank-side arms),
   stamping ``inject`` on its own clock, and undoes transient ones when they are due.
4. On ``stop`` it kills its ranks, measures the offset again (the drift over the
   trial), posts it and exits.

Every event it and its ranks write carries ``host`` (``FTBENCH_HOST``), so the harness
maps their stamps onto its clock when figures are derived. Event logs go to the run's
events directory, which must be shared between the hosts (docs/multihost.md).
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerContext, SpawnContext
from pathlib import Path
from typing import Any

from bench.hosts.auth import SECRET_ENV, Forged, Sealer, SecretError
from bench.hosts.clock import StorePinger, resolution_ns
from bench.procs.events import ADDRESS_ENV, HOST_ENV, EventWriter
from bench.procs.hygiene import kill_all, redirect_output, set_pdeathsig
from bench.procs.launcher import LocalLauncher, RankProcess, rank_context
from bench.rank.deaths import report_death

ELASTIC_ARGS = frozenset(
    f"--{name}"
    for name in (
        "nnodes",
        "nproc-per-node",
        "max-restarts",
        "monitor-interval",
        "rdzv-backend",
        "rdzv-endpoint",
        "rdzv-id",
        "rdzv-conf",
    )
)
"""The elastic agent arguments a harness may pass to a host agent (nothing that names a
program: the worker command is the rank entry, always)."""
ELASTIC_ENV = frozenset({"OMP_NUM_THREADS", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"})
"""The environment a harness may set for an elastic agent (the strategy's ``agent_env``)."""
OPS = frozenset({"start", "kill", "fault", "elastic", "ending", "stop"})
"""What the harness may ask of an agent."""
TICK_S = 0.005
"""How often the agent looks for commands while it has ranks: it bounds the lag of a
fault the harness delivers (not any figure: the agent stamps when it acts)."""
BEAT_S = 0.5
"""How often the agent counts up ``agent/HOST/beat`` (from a thread with a connection of
its own, so that starting a forkserver does not look like death): how a harness that did
not start the agent (srun, ssh) tells that it is still there."""


def key(host: str, what: str) -> str:
    """A key of the agent protocol, under the trial store's ``ftb`` prefix."""
    return f"agent/{host}/{what}"


GRACE_S = 1.0
"""How long a queue slot may stay allocated but unwritten while later ones are written:
a sender fills its slot microseconds after taking it, so a longer hole is someone's who
took a slot and never wrote it (skipped, so that it cannot hold up what follows)."""


def send(store: Any, sealer: Sealer, host: str, command: dict[str, Any]) -> None:
    """Queue a command for ``host``'s agent (harness side)."""
    enqueue(store, sealer, host, "cmd", command)


def enqueue(store: Any, sealer: Sealer, host: str, queue: str, body: Any) -> None:
    """Take the next slot of ``host``'s ``queue`` (``cmd``: commands to its agent;
    ``exit``: its agent's exit reports) and fill it with a sealed ``body``."""
    n = int(store.add(key(host, f"n{queue}"), 1)) - 1
    post(store, sealer, key(host, f"{queue}/{n}"), body)


@dataclass
class Inbox:
    """The reading end of a queue: its messages in slot order, each opened (a message
    that fails its MAC comes out as the :class:`Forged` error, for the reader to log)."""

    store: Any
    sealer: Sealer
    host: str
    queue: str
    next: int = 0
    _hole_since: float | None = None

    def messages(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        total = int(self.store.add(key(self.host, f"n{self.queue}"), 0))
        while self.next < total:
            k = key(self.host, f"{self.queue}/{self.next}")
            if not self.store.check([k]):
                now = time.monotonic()
                self._hole_since = self._hole_since or now
                if now - self._hole_since < GRACE_S or self.next + 1 >= total:
                    break  # its writer is about to fill it (or nothing follows it yet)
                out.append((k, Forged(f"{k}: taken but never written")))
            else:
                try:
                    out.append((k, self.sealer.open(k, self.store.get(k))))
                except Forged as err:
                    out.append((k, err))
            self.next += 1
            self._hole_since = None
        return out


def post(store: Any, sealer: Sealer, k: str, body: Any) -> None:
    """Set ``k`` to a sealed ``body`` (a report of the agent, a command of the harness)."""
    store.set(k, sealer.seal(k, body))


@dataclass
class _Firing:
    injector: Any
    undo_at: int | None
    index: int
    kind: str


@dataclass
class AgentHost:
    """The :class:`~bench.procs.launcher.RankHost` of an agent: its own forkserver, and a
    sweep that kills the ranks it started (never anything else of the run: the other
    hosts' processes are not its own)."""

    contexts: dict[str, ForkServerContext | SpawnContext] = field(default_factory=dict)
    launcher: LocalLauncher | None = None

    def context(self, start_method: str, preload: tuple[str, ...] = ()) -> ForkServerContext | SpawnContext:
        return rank_context(start_method, self.contexts, preload)

    def sweep_trial(self) -> list[int]:
        if self.launcher is None:
            return []
        return kill_all([r.process.pid for r in self.launcher.running() if r.process and r.process.pid])


class Agent:
    def __init__(self, store: Any, sealer: Sealer, host: str, events_dir: Path, events: EventWriter) -> None:
        self.store, self.host, self.events_dir, self.events = store, host, events_dir, events
        self.sealer = sealer
        self.inbox = Inbox(store, sealer, host, "cmd")
        self.rank_host = AgentHost()
        self.launcher: LocalLauncher | None = None
        self.done = 0
        """Commands carried out."""
        self.exits = 0
        self.supervised = True
        self.ending = False
        """A rank finished training somewhere: exits are no longer detections."""
        self.firings: list[_Firing] = []
        self.stopping = False
        self.elastic: subprocess.Popen[bytes] | None = None
        """The host's elastic agent (torchrun), for strategies that run one per host."""
        self.vanished = False
        """A whole-host fault took this host away: the agent ends without a word."""

    def measure(self, phase: str) -> None:
        pinger = StorePinger(self.store, f"clock/{self.host}/{phase}", self.sealer)
        offset = pinger.measure()
        pinger.bye()
        post(self.store, self.sealer, key(self.host, f"clock/{phase}"), offset.as_dict())
        self.events.emit("clock", phase=phase, **offset.as_dict())

    def run(self, deadline: float) -> None:
        while not self.stopping and time.monotonic() < deadline:
            self.commands()
            self.reap()
            self.undo_due()

    def commands(self) -> None:
        for k, command in self.inbox.messages():
            self.done += 1
            if isinstance(command, Forged):  # someone without the secret: refused, on the record
                self.events.emit("refused", key=k, reason=str(command))
                continue
            if not isinstance(command, dict):
                self.events.emit("refused", key=k, reason="not a command")
                continue
            op = str(command.get("op"))
            if op not in OPS:
                raise ValueError(f"unknown command {op!r} from the harness")
            getattr(self, f"do_{op}")(command)

    def do_start(self, cmd: dict[str, Any]) -> None:
        from bench.rank.entry import main as rank_main
        from bench.rank.entry import spec_from_json

        spec = spec_from_json(json.dumps(cmd["spec"]), file=f"store:{key(self.host, 'cmd')}")
        self.supervised = bool(cmd["supervised"])
        if self.launcher is None:
            self.launcher = LocalLauncher(
                host=self.rank_host,
                start_method=str(cmd["start_method"]),
                preload=tuple(str(m) for m in cmd["preload"]),
                trial_dir=self.events_dir.parent,
                events_dir=self.events_dir,
            )
            self.rank_host.launcher = self.launcher
        self.launcher.start_rank(spec.rank, rank_main, spec)

    def do_kill(self, cmd: dict[str, Any]) -> None:
        """The job has no more use for this rank (torchft: a replacement still waiting when
        training is over)."""
        if self.launcher is not None:
            for r in self.launcher.running():
                if r.rank == int(cmd["rank"]):
                    self.launcher.kill_rank(r)

    def do_fault(self, cmd: dict[str, Any]) -> None:
        from bench.scenario.faults import FAULTS
        from injectors.base import Target
        from injectors.rankside import Arm

        kind = FAULTS[cmd["kind"]]
        index = int(cmd["fault"])
        injector: Any = Arm(fault_index=index) if kind.rank_side else kind.load()(**cmd["knobs"])
        target = Target(ranks=list(cmd["ranks"]), pids=list(cmd["pids"]))
        t = time.monotonic_ns()
        detail = injector.inject(target)
        t_sent = time.monotonic_ns()
        duration = getattr(injector, "duration_s", None)
        self.firings.append(_Firing(injector, None if duration is None else t + int(duration * 1e9), index, kind.name))
        common = dict(cmd["common"])
        detail = {k: v for k, v in detail.items() if k not in common and k not in ("t", "event")}
        self.events.emit("arm" if kind.rank_side else "inject", t=t, t_sent=t_sent, **common, **detail)
        if getattr(injector, "ends_host", False):
            self.vanished = self.stopping = True

    def do_elastic(self, cmd: dict[str, Any]) -> None:
        """Start this host's elastic agent (torchrun --nnodes N): the strategy's own
        instrumented launcher module, arguments from an allow-list, the rank entry as the
        worker command, the worker spec validated like any spec file."""
        from bench.rank.entry import spec_from_json, spec_to_json
        from bench.scenario.strategy import STRATEGIES

        strategy = STRATEGIES[cmd["strategy"]]
        module = getattr(strategy.load(), "agent_module", None)
        if not strategy.agents or not module:
            raise ValueError(f"strategy {strategy.name} runs no elastic agent under host agents")
        args = [str(a) for a in cmd["args"]]
        bad = [a for a in args if a.split("=", 1)[0] not in ELASTIC_ARGS]
        env = {str(k): str(v) for k, v in cmd.get("env", {}).items()}
        bad += [k for k in env if k not in ELASTIC_ENV]
        if bad:
            raise ValueError(f"elastic agent arguments or environment not allowed: {bad}")
        spec = spec_from_json(json.dumps(cmd["spec"]), file=f"store:{key(self.host, 'cmd')}")
        path = self.events_dir / f"spec-{self.host}.json"
        path.write_text(spec_to_json(spec))
        argv = [sys.executable, "-m", module, str(self.events_dir), "--", *args, "-m", "bench.rank.entry", str(path)]
        log = open(self.events_dir / f"torchrun-{self.host}.log", "ab")  # noqa: SIM115 (the child keeps it)
        with log:
            self.elastic = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **env))

    def do_ending(self, cmd: dict[str, Any]) -> None:
        self.ending = True

    def do_stop(self, cmd: dict[str, Any]) -> None:
        self.stopping = True

    def reap(self) -> None:
        from bench.rank.entry import EXIT_LEFT, EXIT_OK

        if self.elastic is not None and self.elastic.poll() is not None:
            code = self.elastic.returncode
            self.events.emit("proc_exit", of="elastic_agent", exitcode=code)
            post(self.store, self.sealer, key(self.host, "elastic_exit"), code)
            self.elastic = None
        if self.launcher is None or not self.launcher.running():
            time.sleep(TICK_S)
            return
        for r in self.launcher.wait(TICK_S):
            code = r.exitcode
            self.events.emit("proc_exit", of_rank=r.rank, exitcode=code)
            if code == EXIT_OK:
                self.ending = True
            elif code != EXIT_LEFT and not self.ending and self.supervised:
                self.events.emit("detect", how="exit", of_rank=r.rank, exitcode=code)
            self._tell(r, code)

    def _tell(self, r: RankProcess, code: int | None) -> None:
        """The ranks first (nobody waits for a member known dead), then the harness."""
        try:
            report_death(self.store, r.rank, code)
        except Exception:  # the store itself may be the fault's target
            pass
        self.exits += 1
        enqueue(self.store, self.sealer, self.host, "exit", {"rank": r.rank, "exitcode": code})

    def undo_due(self, *, everything: bool = False) -> None:
        now = time.monotonic_ns()
        for f in self.firings:
            if f.undo_at is not None and (everything or now >= f.undo_at):
                t = time.monotonic_ns()
                f.injector.undo()
                f.undo_at = None
                self.events.emit("fault_end", t=t, fault=f.index, kind=f.kind)

    def close(self) -> None:
        self.undo_due(everything=True)
        if self.launcher is not None:
            self.launcher.close()
        if self.elastic is not None:  # its workers outlive it; the run's sweep takes them
            self.elastic.kill()
            self.elastic.wait(timeout=10)


def main(controller: str, host: str, events_dir: Path, deadline_s: float, hostname: str = "") -> int:
    """The life of an agent the harness started for one trial; its exit code (0: stopped
    by the harness). The harness hands it the run's secret in its environment."""
    set_pdeathsig()  # started by the harness itself (one machine): die with it
    secret = os.environ.pop(SECRET_ENV, "")
    if not secret:
        raise SecretError(f"an agent started by the harness gets ${SECRET_ENV} from it; it was not set")
    if hostname:  # in a UTS namespace of its own (one machine): the name others reach it by
        socket.sethostname(hostname)
        os.environ[ADDRESS_ENV] = hostname
    os.environ[HOST_ENV] = host  # every event of this host's processes carries it
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    return serve_trial(controller, host, events_dir, deadline_s, secret=secret)


def serve_trial(
    controller: str, host: str, events_dir: Path, deadline_s: float, *, secret: str, serving: bool = False
) -> int:
    """This host's part of one trial, whose store is at ``controller``: register, measure
    the clock, carry out the harness's commands until ``stop``, measure again.

    A whole-host fault ends the host: an agent the harness started SIGKILLs itself (its
    process is the host's last); one that serves a run for the cluster (``serving``) goes
    silent for the rest of the trial instead, which is how the harness sees a lost host
    it cannot signal, and serves the next trial."""
    import torch.distributed as dist

    events_dir.mkdir(parents=True, exist_ok=True)
    redirect_output(events_dir / f"agent-{host}.log")
    events = EventWriter(events_dir / f"agent-{host}.jsonl", src="supervisor", pid=os.getpid(), host=host)
    events.emit("proc_start", role="host_agent")
    address, port = controller.rsplit(":", 1)

    def connect() -> Any:
        client = dist.TCPStore(address, int(port), None, False, timeout=datetime.timedelta(seconds=deadline_s))
        return dist.PrefixStore("ftb", client)

    store = connect()
    sealer = Sealer(secret, str(events_dir))
    deadline = time.monotonic() + deadline_s
    hello = {"pid": os.getpid(), "hostname": socket.gethostname(), "resolution_ns": resolution_ns()}
    post(store, sealer, key(host, "hello"), hello)
    beating = _beat(connect(), sealer, host)
    try:
        agent = Agent(store, sealer, host, events_dir, events)
        try:
            agent.measure("start")
            agent.run(deadline)
        finally:
            agent.close()
        if agent.vanished:
            events.close()
            if not serving:
                os.kill(os.getpid(), signal.SIGKILL)
            return 0
        agent.measure("end")
    finally:  # a serving agent goes on to the next trial: no beat may outlive this one
        beating.set()
    post(store, sealer, key(host, "bye"), 1)
    events.emit("proc_exit", exitcode=0)
    events.close()
    return 0


def _beat(store: Any, sealer: Sealer, host: str) -> threading.Event:
    """Count ``agent/HOST/beat`` up (sealed: a forged beat cannot keep a lost host alive)
    every :data:`BEAT_S` until the returned event is set (or the store is gone)."""
    stop = threading.Event()

    def beat() -> None:
        n = 0
        try:
            while True:
                n += 1
                post(store, sealer, key(host, "beat"), n)
                if stop.wait(BEAT_S):
                    return
        except Exception:  # the trial's store went away: nobody to tell
            return

    threading.Thread(target=beat, name="ftbench-beat", daemon=True).start()
    return stop


def command_line(controller: str, host: str, events_dir: Path, deadline_s: float) -> list[str]:
    """How the harness (or a cluster's launcher) starts an agent: ``python -m bench host ...``."""
    import sys

    return [
        sys.executable,
        "-m",
        "bench",
        "host",
        "--controller",
        controller,
        "--host",
        host,
        "--events-dir",
        str(events_dir),
        "--deadline-s",
        f"{deadline_s:g}",
    ]


Sender = Callable[[str, dict[str, Any]], None]
