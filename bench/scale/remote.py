"""Participants on other hosts: the harness's side of ``ftbench scale --agents-at``.

On one machine the driver talks to each process of participants over a pipe
(:mod:`bench.scale.worker`). Across hosts the processes of participants run on the
hosts of the cluster, started by the host agent the cluster started there (``ftbench
host --serve``, docs/multihost.md), and the driver reaches them through the run store
those agents joined (:class:`bench.hosts.cluster.Cluster`):

- each message is JSON sealed with the run's secret (:mod:`bench.hosts.auth`), its scope
  the session and the agent's nonce, its key the message's slot: nothing received from
  the network is unpickled or executed, and a message replayed from another session,
  host or slot is refused. Each host's agent (:mod:`bench.scale.hostside`) checks every
  field, builds the participants' context itself and names their code from the
  coordinators' table (never from the message), and relays it to its own processes over
  a local pipe;
- :class:`RemoteConn` and :class:`RemoteProcess` are what the driver uses of a pipe and a
  process (``send``/``poll``/``recv``; ``join``/``is_alive``/``kill``), so that the driver
  runs a point the same way whichever side its participants are on;
- clocks: a host's CLOCK_MONOTONIC is not the head's. At the start and the end of every
  point each host measures its offset to the head through the store
  (:mod:`bench.hosts.clock`); the release instant goes to a host on the host's clock
  (the head's release less the start offset) and each participant's result comes back
  on the head's (plus it). A latency is a difference of one host's stamps, so the offset
  cancels in it; what the offset's error moves is the instant each host released its
  participants, so every figure of the point is uncertain by the largest such error among
  the hosts that took part (:meth:`Fleet.end_point`), and points.csv says so per row
  (``clock_err_s``).

A host whose agent stops beating for :data:`LOST_S` is lost: the replies the driver waits
for from it end as if its processes had exited, and the point fails, not the wait.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from bench.hosts.agent import post
from bench.hosts.auth import Forged, Sealer
from bench.hosts.clock import Offset, Responder
from bench.hosts.cluster import LOST_S, PREFIX, Cluster
from bench.procs.launcher import LaunchError
from bench.scale.capacity import Capacity
from bench.scale.coordinators import COORDINATORS
from bench.scale.spec import MAX_N, ScaleSpec, check

SERVICE = "scale"
"""The kind of assignment a serving agent hands to :mod:`bench.scale.hostside`."""
BEAT_S = 0.5
"""How often a host's side counts its beat up."""
POLL_MAX_S = 0.02
"""Longest pause between two looks at a slot the harness waits on. The harness polls
(``check``) rather than block in c10d's ``wait``: a wait that times out logs a warning
from torch's C++ on every slice, and the harness must look at the hosts' beats between
slices. Nothing timed depends on it: the hosts stamp their own results."""
CALL_S = 120.0
"""How long a host's agent may take to answer a control message (start a process of
participants, measure its clock) on loaded cores."""
MAX_IDS = MAX_N
MAX_TEXT = 4096


class Refused(ValueError):
    """A message whose MAC holds but whose content is not what the protocol allows."""


# --- one direction of messages through the store ------------------------------------


@dataclass
class Channel:
    """Messages one way, in slot order: slot ``i`` is the key ``PREFIX/i``, its body
    sealed with the key in the MAC (a message cannot move to another slot), deleted once
    read (a sweep of thousands of points would otherwise fill the head's store)."""

    store: Any
    sealer: Sealer
    prefix: str
    refused: Callable[[str], None] = lambda why: None
    n: int = 0

    @property
    def key(self) -> str:
        return f"{self.prefix}/{self.n}"

    def put(self, body: Any) -> None:
        post(self.store, self.sealer, self.key, body)
        self.n += 1

    def check(self) -> bool:
        return bool(self.store.check([self.key]))

    def wait(self, timeout_s: float) -> bool:
        """Block until the next slot is filled (True) or ``timeout_s`` passes (False); a
        store that went away raises. For the hosts' side, where a message should be
        acted on the moment it is there (the release) and the waits are long."""
        import torch.distributed as dist

        try:
            self.store.wait([self.key], datetime.timedelta(seconds=max(0.001, timeout_s)))
        except dist.DistStoreError:  # the timeout; a dead store is a DistNetworkError
            return False
        return True

    def take(self, timeout_s: float = 5.0) -> Any:
        """The next slot's body (the slot is filled). A forged one is refused and read
        again until the sender's own overwrites it, for ``timeout_s`` (then Forged)."""
        k = self.key
        deadline = time.monotonic() + timeout_s
        said = b""
        while True:
            raw = bytes(self.store.get(k))
            try:
                body = self.sealer.open(k, raw)
                break
            except Forged as err:
                if raw != said:
                    said = raw
                    self.refused(str(err))
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        self.store.delete_key(k)
        self.n += 1
        return body


def opened(store: Any, sealer: Sealer, k: str) -> Any:
    """The body sealed at ``k``, None when it is absent or not sealed with the secret."""
    if not store.check([k]):
        return None
    try:
        return sealer.open(k, bytes(store.get(k)))
    except Forged:
        return None


# --- the messages ---------------------------------------------------------------------
#
# The driver's messages to a process of participants and its answers are tuples
# (bench/scale/worker.py). Across hosts each is a JSON object; these functions turn one
# into the other and check every field on the way in.


def context_fields(ctx: Any) -> dict[str, Any]:
    return {f.name: getattr(ctx, f.name) for f in fields(ctx)}


def encode_request(msg: tuple[Any, ...]) -> dict[str, Any]:
    """A driver's message to a process of participants, as JSON (the participants'
    class is not sent: the host names it from the coordinator)."""
    op = msg[0]
    if op == "setup":
        return {"op": op, "ctx": context_fields(msg[1]), "ids": [int(i) for i in msg[3]]}
    if op == "kill":
        return {"op": op, "ids": [int(i) for i in msg[1]]}
    if op == "arm":
        return {"op": op, "name": str(msg[1]), "ids": [int(i) for i in msg[2]]}
    if op == "go":
        return {"op": op, "release_ns": int(msg[1]), "wait_s": float(msg[2])}
    if op in ("reset", "close"):
        return {"op": op}
    raise ValueError(f"no such message to participants: {op!r}")


def _int(v: Any, low: int, high: int, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
        raise Refused(f"{what}: {v!r} is not an integer in {low}..{high}")
    return v


def _number(v: Any, what: str) -> float:
    if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
        raise Refused(f"{what}: {v!r} is not a number")
    return float(v)


def _text(v: Any, what: str) -> str:
    if not isinstance(v, str) or len(v) > MAX_TEXT:
        raise Refused(f"{what}: not a string of at most {MAX_TEXT} characters")
    return v


def _ids(v: Any, n: int) -> list[int]:
    if not isinstance(v, list) or len(v) > MAX_IDS:
        raise Refused("ids: not a list of participants")
    return [_int(i, 0, n - 1, "a participant id") for i in v]


def _body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or not isinstance(body.get("op"), str):
        raise Refused("not a message")
    return body


_KNOBS = frozenset(ScaleSpec().knobs())


def decode_context(raw: Any) -> dict[str, Any]:
    """The fields of a participants' context, each checked; the host makes the
    :class:`~bench.scale.participants.Context` from them."""
    if not isinstance(raw, dict):
        raise Refused("ctx: not an object")
    expected = {"coordinator", "n", "address", "port", "rep", "deadline_s", "knobs", "host"}
    if set(raw) != expected:
        raise Refused(f"ctx: fields {sorted(raw)}, expected {sorted(expected)}")
    name = raw["coordinator"]
    if name not in COORDINATORS:
        raise Refused(f"ctx: no coordinator {name!r}")
    knobs = raw["knobs"]
    if not isinstance(knobs, dict) or not set(knobs) <= _KNOBS:
        raise Refused("ctx: knobs are not the sweep's settings")
    try:
        checked = {k: check(k, v, "ctx.knobs") for k, v in knobs.items()}
        deadline = check("deadline_s", raw["deadline_s"], "ctx")
    except ValueError as err:
        raise Refused(str(err)) from None
    host = _text(raw["host"], "ctx.host")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise Refused(f"ctx.host: {host!r} is not an IP address") from None
    return {
        "coordinator": name,
        "n": _int(raw["n"], 2, MAX_N, "ctx.n"),
        "address": _text(raw["address"], "ctx.address"),
        "port": _int(raw["port"], 1, 65535, "ctx.port"),
        "rep": _int(raw["rep"], 0, 1000, "ctx.rep"),
        "deadline_s": deadline,
        "knobs": checked,
        "host": host,
    }


@dataclass
class RequestState:
    """What a host remembers between requests to one process: the point's coordinator
    and size, against which later requests are checked."""

    coordinator: str = ""
    n: int = 0


def decode_request(raw: Any, state: RequestState) -> tuple[Any, ...]:
    """A request from the harness as the tuple the process of participants takes;
    Refused for anything else. ``setup`` comes back with the context's fields (a dict)
    and the participants' class named by the coordinator's table."""
    body = _body(raw)
    op = body["op"]
    if op == "setup":
        ctx = decode_context(body.get("ctx"))
        state.coordinator, state.n = ctx["coordinator"], ctx["n"]
        return ("setup", ctx, COORDINATORS[ctx["coordinator"]].participant, _ids(body.get("ids"), ctx["n"]))
    if op in ("reset", "close"):
        return (op,)
    if op not in ("kill", "arm", "go"):
        raise Refused(f"no such request: {op!r}")
    if not state.coordinator:
        raise Refused(f"{op} before setup")
    if op == "kill":
        return ("kill", _ids(body.get("ids"), state.n))
    if op == "arm":
        name = body.get("name")
        if name not in {o.name for o in COORDINATORS[state.coordinator].ops}:
            raise Refused(f"arm: {state.coordinator} has no operation {name!r}")
        return ("arm", name, _ids(body.get("ids"), state.n))
    return ("go", _int(body.get("release_ns"), 0, 2**63 - 1, "release_ns"), _number(body.get("wait_s"), "wait_s"))


def encode_reply(msg: tuple[Any, ...]) -> dict[str, Any]:
    """A process of participants' answer (bench/scale/worker.py), as JSON."""
    op = msg[0]
    if op == "started":
        return {"op": op, "pid": int(msg[1]), "note": str(msg[2])}
    if op == "ready":
        return {
            "op": op,
            "errors": [[int(i), str(e)] for i, e in msg[1].items()],
            "seconds": float(msg[2]),
            "retries": int(msg[3]),
        }
    if op == "killed":
        return {"op": op, "errors": [[int(i), str(e)] for i, e in msg[1].items()]}
    if op == "armed":
        return {"op": op, "count": int(msg[1])}
    if op == "done":
        results = [[int(i), None if t is None else int(t), str(e)] for i, t, e in msg[1]]
        return {"op": op, "results": results, "cpu_s": float(msg[2]), "late_ns": int(msg[3])}
    if op in ("reset", "closed"):
        return {"op": op}
    raise ValueError(f"no such answer of participants: {op!r}")


def _errors(v: Any) -> dict[int, str]:
    if not isinstance(v, list):
        raise Refused("errors: not a list")
    out = {}
    for item in v:
        if not isinstance(item, list) or len(item) != 2:
            raise Refused("errors: not [id, error] pairs")
        out[_int(item[0], 0, MAX_N, "a participant id")] = _text(item[1], "an error")
    return out


def _result(item: Any) -> tuple[int, int | None, str]:
    if not isinstance(item, list) or len(item) != 3:
        raise Refused("results: not [id, done_ns, error] triples")
    i, t, e = item
    done = None if t is None else _int(t, 0, 2**63 - 1, "done_ns")
    return _int(i, 0, MAX_N, "a participant id"), done, _text(e, "an error")


def decode_reply(raw: Any) -> tuple[Any, ...]:
    """An answer from a host, as the tuple the driver takes from a local process;
    ``("exited", code)`` when the process ended; Refused for anything else."""
    body = _body(raw)
    op = body["op"]
    if op == "started":
        return ("started", _int(body.get("pid"), 1, 2**31, "pid"), _text(body.get("note"), "note"))
    if op == "ready":
        return (
            "ready",
            _errors(body.get("errors")),
            _number(body.get("seconds"), "seconds"),
            _int(body.get("retries"), 0, 10 * MAX_N, "retries"),
        )
    if op == "killed":
        return ("killed", _errors(body.get("errors")))
    if op == "armed":
        return ("armed", _int(body.get("count"), 0, MAX_N, "count"))
    if op == "done":
        results = body.get("results")
        if not isinstance(results, list):
            raise Refused("results: not a list")
        late = _int(body.get("late_ns"), -(2**62), 2**62, "late_ns")
        return ("done", [_result(r) for r in results], _number(body.get("cpu_s"), "cpu_s"), late)
    if op in ("reset", "closed"):
        return (op,)
    if op == "exited":
        code = body.get("code")
        return ("exited", None if code is None else _int(code, -255, 255, "code"))
    if op == "refused":
        return ("refused", _text(body.get("why"), "why"))
    raise Refused(f"no such answer: {op!r}")


# --- the harness's side -------------------------------------------------------------


def worst_error(start: Offset, end: Offset) -> int:
    """How far the start estimate (the one the point's release was mapped with) may be
    from the true offset at any moment of the point, given both estimates: the true
    offset drifts from the start's to the end's, so the start estimate is within its own
    error of where it began and within the difference plus the end's error of where it
    ended (ns)."""
    return max(start.err_ns, abs(end.offset_ns - start.offset_ns) + end.err_ns)


@dataclass
class HostLink:
    """One host of the run, as the harness sees it: its control channel, its beat, the
    offset of its clock at the start of the point under way."""

    name: str
    sealer: Sealer
    base: str
    store: Any
    hostname: str = ""
    address: str = ""
    agent_pid: int = 0
    logs: str = ""
    resolution_ns: int = 0
    """Its CLOCK_MONOTONIC's resolution."""
    capacity: Capacity | None = None
    offset: Offset | None = None
    say: Callable[[str], None] = print
    beat: Any = None
    since: float = field(default_factory=time.monotonic)
    checked: float = 0.0
    lost: bool = False

    def __post_init__(self) -> None:
        self.ctl_in = Channel(self.store, self.sealer, f"{self.base}/ctl/in", self._refused)
        self.ctl_out = Channel(self.store, self.sealer, f"{self.base}/ctl/out", self._refused)

    def _refused(self, why: str) -> None:
        self.say(f"  {self.name}: refused {why}")

    def alive(self) -> bool:
        """False once the host's beat has not moved for :data:`LOST_S` (read at most
        every :data:`BEAT_S`)."""
        if self.lost:
            return False
        now = time.monotonic()
        if now - self.checked < BEAT_S:
            return True
        self.checked = now
        beat = opened(self.store, self.sealer, f"{self.base}/beat")
        if beat != self.beat:
            self.beat, self.since = beat, now
        elif now - self.since > LOST_S:
            self.lost = True
        return not self.lost

    def await_slot(self, channel: Channel, timeout_s: float) -> bool:
        """Whether ``channel``'s next slot is filled within ``timeout_s`` (True too when
        the host is lost: the reader then finds out)."""
        deadline = time.monotonic() + timeout_s
        pause = 0.0005
        while True:
            if channel.check():
                return True
            if not self.alive():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(2 * pause, POLL_MAX_S)

    def call(self, body: dict[str, Any], timeout_s: float = CALL_S) -> dict[str, Any]:
        """A control request to the host's agent and its answer (:meth:`answer`)."""
        self.ctl_in.put(body)
        return self.answer(f"{body['op']}", timeout_s)

    def answer(self, what: str, timeout_s: float) -> dict[str, Any]:
        """The host agent's answer to a control message: LaunchError (the run cannot go on
        as asked) when it is lost, silent or says it could not."""
        if not self.await_slot(self.ctl_out, timeout_s):
            raise LaunchError(f"host {self.name}: no answer to {what} within {timeout_s:g} s")
        if self.lost:
            raise LaunchError(f"host {self.name} is lost: its agent has not beaten for {LOST_S:g} s")
        try:
            reply = self.ctl_out.take()
        except Forged as err:
            raise LaunchError(f"host {self.name}: {err}") from None
        if not isinstance(reply, dict):
            raise LaunchError(f"host {self.name}: {what}: not an answer")
        if reply.get("error"):
            raise LaunchError(f"host {self.name}: {what}: {str(reply['error'])[:MAX_TEXT]}")
        return reply


@dataclass
class RemoteConn:
    """What the driver uses of a pipe to a process of participants, for one on a host:
    messages sealed through the run store, the release mapped to the host's clock and
    each result back to the head's."""

    link: HostLink
    index: int
    lost: bool = False

    def __post_init__(self) -> None:
        base = f"{self.link.base}/w{self.index}"
        self.out = Channel(self.link.store, self.link.sealer, f"{base}/in", self.link._refused)
        self.back = Channel(self.link.store, self.link.sealer, f"{base}/out", self.link._refused)

    @property
    def offset_ns(self) -> int:
        if self.link.offset is None:
            raise RuntimeError(f"host {self.link.name}: no clock offset measured for this point")
        return self.link.offset.offset_ns

    def send(self, msg: tuple[Any, ...]) -> None:
        if msg[0] == "go":  # the head's release instant, on the host's clock
            msg = ("go", int(msg[1]) - self.offset_ns, *msg[2:])
        self.out.put(encode_request(msg))

    def poll(self, timeout_s: float) -> bool:
        return self.link.await_slot(self.back, timeout_s)

    def recv(self) -> tuple[Any, ...]:
        """The next answer. EOFError once the process exited or its host is lost (as a
        pipe whose process ended); RuntimeError for a message the host refused."""
        if self.link.lost:
            raise EOFError(f"host {self.link.name} is lost")
        try:
            msg = decode_reply(self.back.take())
        except (Refused, Forged) as err:  # never acted on: the point fails, saying why
            raise RuntimeError(f"host {self.link.name}: {err}") from None
        if msg[0] == "exited":
            raise EOFError(f"process {self.index} on {self.link.name} exited with {msg[1]}")
        if msg[0] == "refused":
            raise RuntimeError(f"host {self.link.name} refused a message: {msg[1]}")
        if msg[0] == "done":  # each result, on the head's clock
            off = self.offset_ns
            results = [(i, None if t is None else t + off, e) for i, t, e in msg[1]]
            msg = ("done", results, *msg[2:])
        return msg


@dataclass
class RemoteProcess:
    """What the driver uses of a process of participants on a host: join, is_alive, kill."""

    link: HostLink
    index: int

    def _exited(self) -> bool:
        return opened(self.link.store, self.link.sealer, f"{self.link.base}/w{self.index}/exit") is not None

    def join(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (CALL_S if timeout is None else timeout)
        while not self._exited() and self.link.alive() and time.monotonic() < deadline:
            time.sleep(0.02)

    def is_alive(self) -> bool:
        return self.link.alive() and not self._exited()

    def kill(self) -> None:
        """Its host's agent SIGKILLs it (nothing to do where the host is lost)."""
        if self.link.alive():
            self.link.call({"op": "kill", "worker": self.index})


@dataclass
class Fleet:
    """The hosts of a scale run whose agents the cluster started: one session of each
    agent, the processes of participants on them, their clocks, what they can hold."""

    cluster: Cluster
    count: int
    out: Path
    resolver: bool
    """Whether the hosts' processes resolve names without the DNS server (spec.resolver)."""
    idle_s: float
    """How long a host's agent waits for a word from the harness before it ends the
    session (the harness is gone or hung)."""
    progress: Callable[[str], None] = print
    links: list[HostLink] = field(default_factory=list)
    session: str = field(default_factory=lambda: secrets.token_hex(8))
    clocks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per host: its clock's offsets and errors over the run (scale.json)."""
    _store: Any = None
    _started: int = 0
    _measures: int = 0
    _span: dict[str, Offset] = field(default_factory=dict)

    @property
    def address(self) -> str:
        """Where the agents reach the harness: the coordinators listen there."""
        return self.cluster.address

    def connect(self) -> Any:
        """A client of the run store of its own (one connection)."""
        import torch.distributed as dist

        client = dist.TCPStore(
            self.cluster.address, self.cluster.port, None, False, timeout=datetime.timedelta(seconds=CALL_S)
        )
        return dist.PrefixStore(PREFIX, client)

    def open(self) -> Fleet:
        """Wait for the agents, hand each a session, and take each one's hello."""
        (self.out / "logs").mkdir(exist_ok=True)  # where the hosts that see it keep their logs
        self.cluster.open(self.count, self.progress)
        self._store = self.connect()
        for i in range(self.count):
            name = f"h{i}"
            agent = self.cluster.agents[name]
            sealer = Sealer(self.cluster.secret, f"{SERVICE}:{self.cluster.nonces[name]}:{self.session}")
            link = HostLink(
                name=name,
                sealer=sealer,
                base=f"{SERVICE}/{self.session}/{name}",
                store=self._store,
                hostname=agent.hostname,
                address=agent.address,
                agent_pid=agent.pid,
                say=self.progress,
            )
            self.cluster.hand(
                name,
                {
                    "kind": SERVICE,
                    "session": self.session,
                    "rundir": str(self.out),
                    "resolver": self.resolver,
                    "idle_s": self.idle_s,
                },
            )
            self.links.append(link)
        for link in self.links:
            hello = link.answer("hello", CALL_S)
            link.logs = _text(hello.get("logs"), "logs")
            link.resolution_ns = _int(hello.get("resolution_ns"), 1, 10**9, "resolution_ns")
            try:
                link.capacity = Capacity.from_dict(hello.get("capacity"))
            except ValueError as err:
                raise LaunchError(f"host {link.name}: {err}") from None
            self.clocks[link.name] = {"resolution_ns": link.resolution_ns}
            self.progress(f"  {link.name}: processes of participants on {link.hostname}, logs in {link.logs}")
        return self

    def host_of(self, worker: int) -> HostLink:
        """Process ``worker``'s host: round robin, so that the first ``k`` processes of a
        point spread over ``min(k, hosts)`` hosts."""
        return self.links[worker % len(self.links)]

    def start_worker(self, index: int) -> tuple[RemoteProcess, RemoteConn]:
        """Process of participants ``index`` of the driver's list, on its host. Its
        messages' keys carry a number no other process of the session had: the driver
        starts a fresh ``0`` after stopping its processes, and an answer the old one left
        unread must not be taken for the new one's."""
        link = self.host_of(index)
        self._started += 1
        link.call({"op": "start", "worker": self._started})
        return RemoteProcess(link, self._started), RemoteConn(link, self._started)

    def capacities(self) -> dict[str, Capacity]:
        """What each host holds now (threads in use and memory change between points)."""
        for link in self.links:
            link.ctl_in.put({"op": "capacity"})
        out = {}
        for link in self.links:
            try:
                link.capacity = Capacity.from_dict(link.answer("capacity", CALL_S).get("capacity"))
            except ValueError as err:
                raise LaunchError(f"host {link.name}: {err}") from None
            out[link.name] = link.capacity
        return out

    def measure(self, links: list[HostLink]) -> dict[str, Offset]:
        """Each host's clock offset to the head's, all hosts at once: the head answers
        each host's round trips from a thread of its own (:class:`Responder`)."""
        prefixes = {}
        responders = []
        try:
            for link in links:
                self._measures += 1
                prefix = f"{link.base}/clock/{self._measures}"
                prefixes[link.name] = prefix
                responders.append(Responder(self.connect, prefix, link.sealer).start())
                link.ctl_in.put({"op": "clock", "prefix": prefix})
            out = {}
            for link in links:
                try:
                    out[link.name] = Offset.from_dict(link.answer("clock", CALL_S)["offset"])
                except (KeyError, TypeError, ValueError) as err:
                    raise LaunchError(f"host {link.name}: a clock estimate: {err!r}") from None
            return out
        finally:
            for r in responders:
                r.stop()

    def begin_point(self, workers: int) -> None:
        """Before a point's operations: the clocks of the hosts of its first ``workers``
        processes (the offsets its release is mapped with)."""
        links = [self.host_of(i) for i in range(min(workers, len(self.links)))]
        self._span = self.measure(links)
        for link in links:
            link.offset = self._span[link.name]

    def end_point(self, workers: int, label: dict[str, Any]) -> tuple[int, float]:
        """After a point's operations: the clocks again; returns how many hosts held the
        point's ``workers`` processes and the uncertainty their clocks put on every
        figure of the point (s; NaN where a host's end estimate could not be had, or the
        point never began), and records both estimates of each host
        (``logs/clocks.jsonl``, and a summary for scale.json)."""
        hosts = len({self.host_of(i).name for i in range(workers)})
        if not self._span:
            return hosts, math.nan
        links = [link for link in self.links if link.name in self._span]
        try:
            ends = self.measure(links)
        except LaunchError as lost:  # a host lost during the point: its rows stay, their clock error unknown
            self.progress(f"  the clocks after the point: {lost}")
            self._span = {}
            return hosts, math.nan
        worst = 0
        with (self.out / "logs" / "clocks.jsonl").open("a") as fh:
            for link in links:
                start, end = self._span[link.name], ends[link.name]
                err = worst_error(start, end)
                worst = max(worst, err)
                fh.write(
                    json.dumps(
                        {**label, "host": link.name, "start": start.as_dict(), "end": end.as_dict(), "err_ns": err}
                    )
                    + "\n"
                )
                self._summarise(link.name, start, end, err)
        self._span = {}
        return hosts, worst / 1e9

    def _summarise(self, host: str, start: Offset, end: Offset, err: int) -> None:
        c = self.clocks[host]
        first = c.setdefault("first", start.as_dict())
        c["last"] = end.as_dict()
        c["points"] = int(c.get("points", 0)) + 1
        c["err_ns_max"] = max(int(c.get("err_ns_max", 0)), err)
        c["rtt_ns_min"] = min(int(c.get("rtt_ns_min", start.rtt_ns)), start.rtt_ns, end.rtt_ns)
        low = min(int(c.get("offset_ns_min", start.offset_ns)), start.offset_ns, end.offset_ns)
        high = max(int(c.get("offset_ns_max", start.offset_ns)), start.offset_ns, end.offset_ns)
        c["offset_ns_min"], c["offset_ns_max"] = low, high
        c["spread_ns"] = high - low
        c["offset_ns"] = first["offset_ns"]

    def describe(self) -> dict[str, Any]:
        """What scale.json says of the hosts: each one's name, address, agent, logs, what
        it could hold at the start, and its clock over the run."""
        return {
            link.name: {
                "hostname": link.hostname,
                "address": link.address,
                "agent_pid": link.agent_pid,
                "logs": link.logs,
                "capacity": link.capacity.as_dict() if link.capacity else None,
                "lost": link.lost,
                "clock": self.clocks.get(link.name, {}),
            }
            for link in self.links
        }

    def close(self) -> None:
        """End each host's session (its agent kills what is left of it), then tell the
        agents the run is over."""
        try:
            for link in self.links:
                if link.alive():
                    try:
                        link.call({"op": "end"}, 10.0)
                    except RuntimeError as err:
                        self.progress(f"  {link.name}: {err}")
        finally:
            self.cluster.close()


def clock_lines(info: dict[str, Any]) -> list[str]:
    """What a run across hosts says of its clocks (``ftbench scale`` prints it under the
    tables): each host's offset to the head, its drift over the run and the largest
    uncertainty it put on a point's figures."""
    hosts = info.get("hosts")
    if not isinstance(hosts, dict) or not hosts:
        return []
    head = info.get("clock", {})
    lines = [
        f"Clocks across hosts: each host's CLOCK_MONOTONIC (resolution below), mapped onto the head's "
        f"({head.get('resolution_s', 1e-9) * 1e9:g} ns) by offsets measured at the start and end of every point; "
        "every figure of a row is uncertain by its clock_err_s (points.csv), the largest of its hosts':"
    ]
    for name, h in hosts.items():
        c = h.get("clock", {}) if isinstance(h, dict) else {}
        if "offset_ns" not in c:
            lines.append(f"  {name}: no point measured")
            continue
        lines.append(
            f"  {name} ({h.get('hostname', '?')}, {h.get('address', '?')}): offset {c['offset_ns'] / 1e9:+.6f} s, "
            f"estimates spread over {c['spread_ns'] / 1e3:.1f} us, uncertainty up to {c['err_ns_max'] / 1e3:.1f} us "
            f"over {c['points']} point(s), resolution {c.get('resolution_ns', '?')} ns"
        )
    return lines


def spec_for_hosts(spec: ScaleSpec) -> str:
    """Why ``spec`` cannot run across hosts ("" when it can)."""
    if spec.server_family != "inet":
        return "server_family = 'v4-mapped' is a loopback socket; across hosts the coordinator listens on --agents-at"
    return ""
