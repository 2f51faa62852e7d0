"""The harness's side of host agents: a launcher whose ranks live on other hosts.

:class:`AgentLauncher` is a :class:`~bench.procs.launcher.LocalLauncher` whose store
stays with the harness (the controller) and whose ranks are started by one host agent
per host (:mod:`bench.hosts.agent`), through the store. On one machine each host is a
network namespace of the trial's topology AND a time namespace whose CLOCK_MONOTONIC is
ahead of the harness's by ``(i + 1) x launch.clock_shift_s``, so a clock alignment that
is wrong shows as a wrong figure instead of passing unseen. On a cluster the agents are
started by its own tools instead (``srun ftbench host ...``; docs/multihost.md).

The harness answers each agent's clock round trips (:class:`~bench.hosts.clock.Responder`)
at the start and at the end of the trial, and writes both estimates and their
combination to ``clocks.json`` in the trial's events directory, from which the figures
are derived (:func:`bench.procs.events.to_controller`).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from bench.hosts.agent import Inbox, command_line, key, send
from bench.hosts.auth import SECRET_ENV, Forged, Sealer, new_secret
from bench.hosts.clock import Offset, Responder, combine
from bench.procs.events import CLOCKS_FILE, EventWriter
from bench.procs.launcher import LaunchError, LocalLauncher, RankProcess


class AgentProcess(Protocol):
    """What the launcher needs of an agent: ``subprocess.Popen``'s poll, kill and wait."""

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


BYE_S = 20.0
"""How long an agent may take to stop its ranks and measure its clock again."""


@dataclass
class AgentLauncher(LocalLauncher):
    hosts: tuple[str, ...] = ()
    """The network namespace of each host (``h0``, ``h1``, ... in order)."""
    addresses: tuple[str, ...] = ()
    """Each host's address (its name too: an agent sets its host name to it, as servers
    that advertise the host name, like torchrun's, need a name the other hosts reach)."""
    ranks_per_host: int = 1
    clock_shift_s: float = 1000.0
    deadline_s: float = 60.0
    supervised: bool = True
    """Whether agents record a rank's fault exit as a detection (``Strategy.supervised``)."""
    agents: dict[str, AgentProcess] = field(default_factory=dict)
    """host -> its agent: a child process, or (agents the cluster started) a handle on it."""
    start_offsets: dict[str, Offset] = field(default_factory=dict)
    clocks: dict[str, dict[str, int]] = field(default_factory=dict)
    """host -> the start offset as :func:`bench.procs.events.to_controller` takes it."""
    secret: str = field(default_factory=new_secret, repr=False)
    """Shared with the agents (the ones it starts get it in their environment): every
    message between them is sealed with it (:mod:`bench.hosts.auth`)."""
    _exits: dict[str, Inbox] = field(default_factory=dict)
    _ending: bool = False
    _refusals: EventWriter | None = None
    _forged: dict[str, bytes] = field(default_factory=dict)

    @property
    def sealer(self) -> Sealer:
        return Sealer(self.secret, str(self.events_dir))

    def refused(self, k: str, err: Forged) -> None:
        """A message that failed its MAC: never acted on, on the record."""
        if self._refusals is None:
            self._refusals = EventWriter(self.events_dir / "harness-refused.jsonl", src="harness")
        self._refusals.emit("refused", key=k, reason=str(err))

    def opened(self, k: str) -> Any:
        """The body of the sealed message at ``k``; Forged (logged once) if it is not one."""
        raw = bytes(self.control.get(k))
        try:
            return self.sealer.open(k, raw)
        except Forged as err:
            if self._forged.get(k) != raw:
                self._forged[k] = raw
                self.refused(k, err)
            raise

    def reported(self, host: str, what: str) -> bool:
        """Whether ``host``'s agent posted ``what`` (a forged post does not count)."""
        k = key(host, what)
        if not self.control.check([k]):
            return False
        try:
            self.opened(k)
        except Forged:
            return False
        return True

    def names(self) -> list[str]:
        return [f"h{i}" for i in range(len(self.hosts))]

    def start_store(self, timeout_s: float = 60.0, *, wait: bool = True) -> int:
        """The store, then one agent per host; returns once every agent measured its clock
        (whatever ``wait`` says: the agents need the store at once)."""
        port = super().start_store(timeout_s)
        self.control = self.store_client()
        responders = {h: self._responder(f"clock/{h}/start") for h in self.names()}
        try:
            for i, (h, ns) in enumerate(zip(self.names(), self.hosts, strict=True)):
                self.agents[h] = self._spawn(h, ns, int((i + 1) * self.clock_shift_s), port)
                self._exits[h] = Inbox(self.control, self.sealer, h, "exit")
            for h in self.names():
                self.start_offsets[h] = Offset.from_dict(self._await(h, "clock/start", timeout_s))
        finally:
            for r in responders.values():
                r.stop()
        self.clocks = {h: o.as_dict() for h, o in self.start_offsets.items()}
        return port

    def _responder(self, prefix: str) -> Responder:
        return Responder(self.store_client, prefix, self.sealer).start()

    def _spawn(self, host: str, namespace: str, shift_s: int, port: int) -> AgentProcess:
        """``unshare --time --monotonic SHIFT ip netns exec NS python -m bench host ...``:
        unshare's time namespace applies to what it executes, ip netns exec executes the
        agent in the host's network namespace; the agent's ranks inherit both."""
        from injectors.link import nfqueue

        argv = command_line(f"{self.address}:{port}", host, self.events_dir, self.deadline_s + BYE_S)
        index = self.names().index(host)
        if self.addresses:
            argv += ["--hostname", self.addresses[index]]
        env = dict(os.environ, PYTHONPATH=str(nfqueue.PACKAGE_ROOT), **{SECRET_ENV: self.secret})
        with open(self.events_dir / f"agent-{host}.spawn.log", "ab") as log:
            return subprocess.Popen(
                ["unshare", "--time", "--monotonic", str(shift_s), "--uts", "ip", "netns", "exec", namespace, *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
            )

    def _await(self, host: str, what: str, timeout_s: float) -> Any:
        """The body of the agent's sealed ``what``; a forged one is refused and waited past."""
        deadline = time.monotonic() + timeout_s
        k = key(host, what)
        while True:
            if self.control.check([k]):
                try:
                    return self.opened(k)
                except Forged:
                    pass  # refused; the agent's own post may still come
            code = self.agents[host].poll()
            if code is not None:
                raise LaunchError(f"the agent of {host} exited with code {code} (see agent-{host}.log)")
            if time.monotonic() > deadline:
                raise LaunchError(f"the agent of {host} did not post {what} within {timeout_s:.0f} s")
            time.sleep(0.01)

    def host_of(self, rank: int) -> str:
        return f"h{rank // self.ranks_per_host}"

    def deliver(self, host: str, command: dict[str, Any]) -> None:
        """Hand a command (a fault to carry out) to ``host``'s agent."""
        send(self.control, self.sealer, host, command)

    def start_rank(self, rank: int, target: Any, *args: object) -> RankProcess:
        """Ask the rank's host agent to start it (``target`` is the rank entry, as on one
        host; the spec travels as JSON)."""
        from bench.rank.entry import RankSpec, spec_to_json

        (spec,) = args
        assert isinstance(spec, RankSpec)
        command = {
            "op": "start",
            "spec": json.loads(spec_to_json(spec)),
            "start_method": self.start_method,
            "preload": list(self.preload),
            "supervised": self.supervised,
        }
        send(self.control, self.sealer, self.host_of(rank), command)
        rp = RankProcess(rank=rank, process=None, recorded=True)
        self.ranks.append(rp)
        return rp

    def kill_rank(self, r: RankProcess) -> None:
        """Have the rank's host agent SIGKILL it (its exit is reported as any other)."""
        send(self.control, self.sealer, self.host_of(r.rank), {"op": "kill", "rank": r.rank})

    def wait(self, timeout_s: float) -> list[RankProcess]:
        """Exits the agents reported, waiting up to ``timeout_s`` for one."""
        deadline = time.monotonic() + timeout_s
        while True:
            exited = self._collect()
            left = deadline - time.monotonic()
            if exited or left <= 0 or not self.running():
                return exited
            time.sleep(min(left, 0.005))

    def _collect(self) -> list[RankProcess]:
        exited: list[RankProcess] = []
        for h in self.names():
            for k, record in self._exits[h].messages():
                if isinstance(record, Forged):  # an exit nobody with the secret reported did not happen
                    self.refused(k, record)
                    continue
                r = next((r for r in self.running() if r.rank == int(record["rank"])), None)
                if r is not None:
                    r.exitcode = int(record["exitcode"])
                    exited.append(r)
            if self.agents[h].poll() is not None:  # the agent itself is gone: so are its ranks
                for r in self.running():
                    if self.host_of(r.rank) == h:
                        r.exitcode, r.recorded = -9, False
                        exited.append(r)
        if not self._ending and any(r.exitcode == 0 for r in exited):
            self._ending = True
            for h in self.names():
                if self.agents[h].poll() is None:
                    send(self.control, self.sealer, h, {"op": "ending"})
        return exited

    def close(self) -> None:
        """Stop every agent (each measures its clock again first), write ``clocks.json``,
        then kill and reap whatever is left, as one host's launcher does."""
        try:
            if hasattr(self, "control"):
                self._stop_agents()
        finally:
            for p in self.agents.values():
                if p.poll() is None:
                    p.kill()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            super().close()
            if self._refusals is not None:
                self._refusals.close()

    def _stop_agents(self) -> None:
        live = [h for h in self.names() if self.agents[h].poll() is None]
        responders = [self._responder(f"clock/{h}/end") for h in live]
        ends: dict[str, Offset] = {}
        try:
            for h in live:
                send(self.control, self.sealer, h, {"op": "stop"})
            for h in live:
                try:
                    ends[h] = Offset.from_dict(self._await(h, "clock/end", BYE_S))
                except LaunchError:
                    continue  # no end estimate: the start one stands, without a drift bound
        finally:
            for r in responders:
                r.stop()
        clocks: dict[str, Any] = {}
        for i, h in enumerate(self.names()):
            if h not in self.start_offsets:
                continue
            start, end = self.start_offsets[h], ends.get(h)
            clocks[h] = (
                combine(start, end).as_dict()
                | {"start": start.as_dict(), "end": end.as_dict() if end else None}
                | self.host_record(i, h)
            )
        (self.events_dir / CLOCKS_FILE).write_text(json.dumps(clocks, indent=1))

    def host_record(self, index: int, host: str) -> dict[str, Any]:
        """What ``clocks.json`` says of a host besides its offset: here its namespace and
        the true shift of its clock, which a test compares the estimate with."""
        return {"namespace": self.hosts[index], "monotonic_shift_ns": int((index + 1) * self.clock_shift_s * 1e9)}
