"""Host agents that the cluster's own launcher started (``srun``, ``ssh``), not the harness.

On one machine the harness starts one agent per trial inside each host's namespaces
(:mod:`bench.hosts.launcher`). On a cluster the agents are started once, before the
harness knows anything of its trials, by whatever starts programs on the nodes:

    srun --ntasks-per-node=1 ftbench host --serve --controller HEAD:PORT --host h$SLURM_PROCID
    ftbench run SCENARIO --agents-at HEAD:PORT           # on the head node

so they meet in a **run store**: a c10d store the harness serves on the one address and
port named by ``--agents-at`` (an address the agents reach; nothing else listens beyond
loopback). Each agent posts ``hello/HOST`` (its host name, pid, and the address it
reaches the harness from, which the hosts' elastic agents rendezvous on), then waits for
its next assignment ``trial/HOST/N``: the trial store's address, the trial's events
directory and deadline. It serves that trial exactly as an agent the harness started
(:func:`bench.hosts.agent.serve_trial`), sweeps what the trial left on its host, and
waits for the next one, until the harness posts ``done`` or goes away.

The harness cannot see or signal these processes, so it watches each agent through the
trial store: an agent counts ``agent/HOST/beat`` up twice a second while it serves, and
one that has not beaten for :data:`LOST_S` is lost (its ranks with it). Event logs and
checkpoints go to the run directory, which the hosts must share (a cluster file system).
"""

from __future__ import annotations

import datetime
import importlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.hosts.agent import key, post
from bench.hosts.auth import Forged, Sealer, required_secret
from bench.hosts.launcher import AgentLauncher
from bench.procs.events import ADDRESS_ENV, HOST_ENV
from bench.procs.hygiene import MARKER, sweep
from bench.procs.launcher import LaunchError, forkserver_pid

PREFIX = "ftbrun"
"""The run store's key prefix (a trial store's is ``ftb``)."""
LOST_S = 10.0
"""An agent whose beat has not moved for this long is lost: far above its
:data:`~bench.hosts.agent.BEAT_S`, so a loaded host is not taken for a dead one."""
SERVICES: dict[str, str] = {"scale": "bench.scale.hostside:serve"}
"""Assignments other than trials that a serving agent carries out, by kind: the harness
names a kind, never code; the code is named here (``module:function``, imported when
first asked for: ``ftbench scale --agents-at``'s processes of participants live in a
layer above this one). Each is called as ``serve(connect, host, body, secret=, nonce=,
say=)`` and returns an exit status."""
POLL_S = 0.05
"""How often a waiting agent looks for its next assignment."""
CHECK_S = 0.1
"""How often the harness looks at an agent's beat: bounds when it learns of a lost
host beyond :data:`LOST_S` (the ranks' own detection is stamped where it happens)."""


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """What an agent said of itself when it joined the run."""

    host: str
    hostname: str
    address: str
    """The address it reaches the harness from: where the others reach it."""
    pid: int


def parse_address(text: str) -> tuple[str, int]:
    """``ADDR:PORT`` (``[v6]:PORT`` too) to a bindable address and a port; ValueError
    naming what is wrong. A wildcard is refused: the run store listens on one address."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdecimal() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: expected ADDR:PORT with a port in 1..65535")
    if host in ("0.0.0.0", "::", "*"):
        raise ValueError(f"{text!r}: name the one address the agents reach, not a wildcard")
    try:
        address = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
    except OSError as exc:
        raise ValueError(f"{text!r}: {host!r} does not resolve ({exc.strerror})") from exc
    return str(address), int(port)


class Cluster:
    """The harness's side of a run whose host agents were started by the cluster: the run
    store, the agents that joined it, and each trial's launcher."""

    def __init__(self, address: str, port: int, *, secret: str, wait_s: float = 300.0) -> None:
        self.address, self.port, self.wait_s = address, port, wait_s
        self.secret = secret
        self.run = Sealer(secret, "run")
        self.nonces: dict[str, str] = {}
        """Each agent's nonce from its hello: the scope of its assignments."""
        self.agents: dict[str, AgentInfo] = {}
        self.assigned: dict[str, int] = {}
        self._server: Any = None
        self._store: Any = None

    def open(self, hosts: int, progress: Callable[[str], None]) -> None:
        """Serve the run store and wait until agents ``h0`` .. ``h{hosts-1}`` joined."""
        import torch.distributed as dist

        from bench.procs.store import bound_store

        try:
            self._server = bound_store(self.address, timeout_s=60, port=self.port)
        except OSError as exc:
            raise LaunchError(f"--agents-at {self.address}:{self.port}: cannot listen there ({exc.strerror})") from exc
        self._store = dist.PrefixStore(PREFIX, self._server)
        names = [f"h{i}" for i in range(hosts)]
        where = f"{self.address}:{self.port}"
        progress(f"  waiting up to {self.wait_s:.0f} s for host agents {', '.join(names)} at {where}")
        deadline = time.monotonic() + self.wait_s
        hellos: dict[str, dict[str, Any]] = {}
        refused: dict[str, bytes] = {}

        def say(text: str) -> None:
            progress(f"  {text}")

        while True:
            for h in names:
                hello = hellos.get(h) or _sealed(self._store, self.run, f"hello/{h}", refused, say)
                if hello is not None:
                    hellos[h] = hello
            missing = [h for h in names if h not in hellos]
            if not missing:
                break
            if time.monotonic() > deadline:
                joined = sorted(set(names) - set(missing)) or ["none"]
                raise LaunchError(
                    f"host agents {', '.join(missing)} did not join {self.address}:{self.port} within "
                    f"{self.wait_s:.0f} s (joined: {', '.join(joined)}); start one `ftbench host --serve` per host"
                )
            time.sleep(POLL_S)
        for h in names:
            hello = hellos[h]
            self.nonces[h] = str(hello["nonce"])
            self.agents[h] = AgentInfo(h, str(hello["hostname"]), str(hello["address"]), int(hello["pid"]))
            progress(f"  host agent {h}: {self.agents[h].hostname} ({self.agents[h].address}), pid {hello['pid']}")

    def assign(self, host: str, *, controller: str, events_dir: Path, deadline_s: float) -> None:
        """Hand ``host``'s agent its next trial."""
        self.hand(host, {"controller": controller, "events_dir": str(events_dir), "deadline_s": deadline_s})

    def hand(self, host: str, body: dict[str, Any]) -> None:
        """Hand ``host``'s agent its next assignment: a trial, or with ``kind`` one of
        :data:`SERVICES` (bound to the nonce it joined with, as every assignment)."""
        n = self.assigned.get(host, 0)
        self.assigned[host] = n + 1
        post(self._store, Sealer(self.secret, f"run:{self.nonces[host]}"), f"trial/{host}/{n}", body)

    def hosts(self, count: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The host names and addresses of agents ``h0`` .. ``h{count-1}``, which a point
        with that many hosts needs; LaunchError naming the ones that did not join."""
        names = [f"h{i}" for i in range(count)]
        missing = [h for h in names if h not in self.agents]
        if missing:
            raise LaunchError(f"this point needs host agents {', '.join(missing)}, which did not join the run")
        return tuple(self.agents[h].hostname for h in names), tuple(self.agents[h].address for h in names)

    def close(self) -> None:
        """Tell every agent the run is over (each exits 0)."""
        if self._store is not None:
            post(self._store, self.run, "done", 1)
            deadline = time.monotonic() + 2.0  # let them read it before the store goes
            while time.monotonic() < deadline and any(not self._store.check([f"left/{h}"]) for h in self.agents):
                time.sleep(POLL_S)
        self._server = self._store = None


@dataclass
class RemoteAgent:
    """An agent the harness did not start, seen through the trial store: the subset of
    ``subprocess.Popen`` the agent launcher uses (``poll``, ``kill``, ``wait``)."""

    launcher: AgentLauncher
    host: str
    since: float = field(default_factory=time.monotonic)
    beat: int = -1
    returncode: int | None = None
    checked: float = 0.0

    def poll(self) -> int | None:
        """None while the agent serves the trial; 0 once it said bye, -9 once it is lost.
        Asks the store at most every :data:`CHECK_S` (the launcher polls every few ms)."""
        if self.returncode is not None or time.monotonic() - self.checked < CHECK_S:
            return self.returncode
        self.checked = time.monotonic()
        if self.launcher.reported(self.host, "bye"):
            self.returncode = 0
            return 0
        beat = self.beat
        if self.launcher.reported(self.host, "beat"):
            beat = int(self.launcher.opened(key(self.host, "beat")))
        now = time.monotonic()
        if beat != self.beat:
            self.beat, self.since = beat, now
        elif now - self.since > LOST_S:
            self.returncode = -9
        return self.returncode

    def kill(self) -> None:
        """Nothing to signal from here: the agent stops on ``stop``, its launcher ends it."""

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (LOST_S if timeout is None else timeout)
        while (code := self.poll()) is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"host agent {self.host}", timeout or LOST_S)
            time.sleep(POLL_S)
        return code


@dataclass
class ClusterLauncher(AgentLauncher):
    """The agent launcher of a trial whose agents the cluster started: each is handed the
    trial instead of being spawned for it; the clocks are the hosts' own."""

    cluster: Cluster | None = None

    def _spawn(self, host: str, namespace: str, shift_s: int, port: int) -> Any:
        assert self.cluster is not None
        self.cluster.assign(
            host, controller=f"{self.address}:{port}", events_dir=self.events_dir, deadline_s=self.deadline_s
        )
        return RemoteAgent(self, host)

    def host_record(self, index: int, host: str) -> dict[str, Any]:
        assert self.cluster is not None
        agent = self.cluster.agents[host]
        return {"hostname": agent.hostname, "address": agent.address, "agent_pid": agent.pid}


def serve(controller: str, host: str, deadline_s: float) -> int:
    """The life of an agent the cluster started: join the run at ``controller``, serve
    each trial the harness assigns, until it says ``done`` (exit 0), goes away (exit 3) or
    leaves it ``deadline_s`` without a word: before the first trial or between two (exit 4).
    Everything it takes from the run store must be sealed with the shared secret."""
    import secrets

    import torch.distributed as dist

    from bench.hosts.agent import serve_trial

    address, port = parse_address(controller)
    secret = required_secret(address, "the run store")  # refused before this process changes anything
    os.environ[HOST_ENV] = host
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # What this agent starts carries a marker of its own: what a trial leaves on this host
    # (an elastic agent's orphaned workers) is found and killed before the next one.
    marker = f"agent-{host}-{os.getpid()}"
    os.environ[MARKER] = marker
    deadline = time.monotonic() + deadline_s
    run, nonce = Sealer(secret, "run"), secrets.token_hex(8)
    assigned = Sealer(secret, f"run:{nonce}")

    def say(text: str) -> None:
        sys.stderr.write(f"ftbench host {host}: {text}\n")
        sys.stderr.flush()

    def connect() -> Any:
        """A connection of its own to the run store."""
        client = dist.TCPStore(address, port, None, False, timeout=datetime.timedelta(seconds=deadline_s))
        return dist.PrefixStore(PREFIX, client)

    try:
        store = connect()
        here = _local_address(address, port)
        hello = {"pid": os.getpid(), "hostname": socket.gethostname(), "address": here, "nonce": nonce}
        os.environ[ADDRESS_ENV] = here
        post(store, run, f"hello/{host}", hello)
        say(f"joined the run at {address}:{port} as {hello['hostname']} ({hello['address']})")
        console = os.dup(1), os.dup(2)  # a trial sends them to its own log; back after it
        n = 0
        refused: dict[str, bytes] = {}
        while time.monotonic() < deadline:
            if _sealed(store, run, "done", refused, say) is not None:
                post(store, run, f"left/{host}", 1)
                say(f"the run is over after {n} trial(s)")
                return 0
            trial = _sealed(store, assigned, f"trial/{host}/{n}", refused, say)
            if trial is None:
                time.sleep(POLL_S)
                continue
            n += 1
            kind = trial.get("kind", "trial") if isinstance(trial, dict) else "trial"
            try:
                if kind != "trial":
                    _service(str(kind), connect, host, trial, secret=secret, nonce=nonce, say=say)
                    continue
                serve_trial(
                    str(trial["controller"]),
                    host,
                    Path(str(trial["events_dir"])),
                    float(trial["deadline_s"]),
                    secret=secret,
                    serving=True,
                )
            except Exception as exc:  # the trial's store went away mid-trial: the next trial may still come
                say(f"{kind} {n} ended with {type(exc).__name__}: {exc}")
            finally:  # what the trial left, but the forkserver: it serves the next trial
                forkserver = forkserver_pid()
                sweep(marker, keep={forkserver} if forkserver else ())
                os.dup2(console[0], 1)
                os.dup2(console[1], 2)
                deadline = time.monotonic() + deadline_s
        say(f"no word from the harness within --deadline-s {deadline_s:g}")
        return 4
    except (RuntimeError, OSError) as exc:  # the harness (its run store) is gone
        say(f"the harness went away: {exc}")
        return 3


def _service(kind: str, connect: Callable[[], Any], host: str, body: Any, **kw: Any) -> None:
    """Carry out an assignment of ``kind`` (one of :data:`SERVICES`; any other is refused)."""
    target = SERVICES.get(kind)
    if target is None:
        raise ValueError(f"no such assignment: {kind!r}")
    module, _, name = target.partition(":")
    code = getattr(importlib.import_module(module), name)(connect, host, body, **kw)
    kw["say"](f"{kind} session over ({code})")


def _sealed(store: Any, sealer: Sealer, k: str, refused: dict[str, bytes], say: Callable[[str], None]) -> Any:
    """The body at ``k`` if it is there and sealed with the run's secret, else None; a
    forged one is said once and waited past (the harness's own post overwrites it)."""
    if not store.check([k]):
        return None
    raw = bytes(store.get(k))
    try:
        return sealer.open(k, raw)
    except Forged as err:
        if refused.get(k) != raw:
            refused[k] = raw
            say(f"refused {k}: {err}")
        return None


def _local_address(address: str, port: int) -> str:
    """The address of this host on the route to the harness (no packet is sent)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((address, port))
        return str(s.getsockname()[0])
