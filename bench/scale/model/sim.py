"""The discrete-event replay of one operation at N participants on a machine (simpy).

What takes time, as resources and delays:

- **a participant's own work**, a CPU chunk before each request: on a CPU of its own,
  or, on one machine, first its process's interpreter lock (participants packed as
  threads take turns at it), then one of the shared cores;
- **the coordinator's service**: its serving thread(s), FIFO, and on one machine a core
  too (it competes with the participants for them);
- **the network**: half a round trip each way, and the coordinator's bandwidth for the
  bytes (one transfer at a time through its NIC);
- **gates**: a held request waits until every participant that takes part arrived
  (and the gate's timer and tick); then the coordinator answers each, one after another;
- **the rendezvous race**: the state's version on the coordinator; a compare-and-set
  that finds a newer version fails and returns that state, and the agent tries again.

A participant's completion is when the reply to its last request arrives. The result
is the participants' p50 and p95 and ``all`` (the last), from one replay with a fixed
seed (the spread of a protocol's timers is drawn, not averaged away).
"""

from __future__ import annotations

import math
import random
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from bench.scale.model.machine import Machine
from bench.scale.model.protocols import RENDEZVOUS_JITTER_S, RENDEZVOUS_POLL_S, Gate, Protocol, Step

Proc = Generator[simpy.Event, Any, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Costs:
    """What one operation costs at the N being replayed, per participant and request."""

    client_s: float
    """A participant's own CPU for the whole operation, spread over its requests."""
    client_per_byte_s: float
    server_per_request_s: float
    """The coordinator's CPU per request (connections included)."""
    server_per_byte_s: float
    bytes: float
    """Bytes a participant moves (in and out)."""
    requests: float
    """Requests a participant sends, as measured (segments)."""
    serving_threads: int = 1
    heartbeat_s: float = 0.0
    """Every participant heartbeats the coordinator this often meanwhile (0: none)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RaceCosts:
    """The rendezvous race: its state and what reading and writing it costs."""

    bytes_per_entry: float
    """Base64 of the pickled state, per agent in it."""
    client_per_entry_s: float
    """Pickling and unpickling the state, per agent in it (an attempt does both)."""
    client_per_attempt_s: float
    """An attempt's work whatever the state's size (torch's event records)."""
    server_per_request_s: float
    server_per_byte_s: float
    serving_threads: int = 1


@dataclass(frozen=True, slots=True)
class Outcome:
    p50_s: float
    p95_s: float
    all_s: float

    @staticmethod
    def of(done: list[float]) -> Outcome:
        if not done:
            return Outcome(math.nan, math.nan, math.nan)
        p50, p95 = np.percentile(done, [50, 95])
        return Outcome(float(p50), float(p95), float(max(done)))


class _World:
    """The shared resources of one replay."""

    def __init__(self, machine: Machine, n: int, processes: int, threads: int) -> None:
        self.env = simpy.Environment()
        self.m = machine
        self.cores = simpy.Resource(self.env, machine.shared_cores) if machine.shared_cores else None
        self.locks = [simpy.Resource(self.env, 1) for _ in range(processes)] if machine.packed else []
        bounds = np.array_split(np.arange(n), max(1, processes))
        self.process_of = np.zeros(n, dtype=int)
        for p, chunk in enumerate(bounds):
            self.process_of[chunk] = p
        self.server = simpy.PriorityResource(self.env, threads)
        self.nic = simpy.Resource(self.env, 1)

    def cpu(self, who: int, seconds: float) -> Proc:
        """A participant's work: its process's lock, then a core (one machine); else its own CPU."""
        seconds *= self.m.cpu_scale
        if seconds <= 0:
            return
        if self.locks:
            with self.locks[self.process_of[who]].request() as lock:
                yield lock
                yield from self._on_core(seconds)
        else:
            yield from self._on_core(seconds)

    def _on_core(self, seconds: float) -> Proc:
        if self.cores is not None:
            with self.cores.request() as core:
                yield core
                yield self.env.timeout(seconds)
        else:
            yield self.env.timeout(seconds)

    def serve(self, seconds: float, priority: int = 0) -> Proc:
        """The coordinator's work: its serving thread, and a shared core where it has none
        of its own. Lower ``priority`` is served first (heartbeats interleave with a long
        queue of answers rather than wait behind all of it)."""
        seconds *= self.m.cpu_scale
        with self.server.request(priority=priority) as thread:
            yield thread
            if self.cores is not None and self.m.coordinator_shares_cores:
                with self.cores.request() as core:
                    yield core
                    yield self.env.timeout(seconds)
            else:
                yield self.env.timeout(seconds)

    def wire(self, nbytes: float) -> Proc:
        """Half a round trip, and the bytes through the coordinator's NIC."""
        if nbytes > 0 and self.m.bandwidth_bytes_s < math.inf:
            with self.nic.request() as nic:
                yield nic
                yield self.env.timeout(nbytes / self.m.bandwidth_bytes_s)
        yield self.env.timeout(self.m.rtt_s / 2)


def relay_depth(rank: int, fanout: int) -> int:
    """Relays between the coordinator's value and group ``rank`` in bench.rank.relay's tree:
    a rank reads from the rank with its lowest non-zero digit (base ``fanout``) cleared, the
    ranks of one non-zero digit from the coordinator; so one relay fewer than its digits."""
    digits = 0
    while rank:
        digits += rank % fanout != 0
        rank //= fanout
    return max(0, digits - 1)


def deepest_relay(n: int, fanout: int) -> int:
    """The largest :func:`relay_depth` among ranks below ``n``."""
    if n <= 1:
        return 0
    places = 0
    while fanout**places <= n - 1:
        places += 1
    all_nonzero = (fanout**places - 1) // (fanout - 1)  # the smallest rank whose every digit is set
    return places - 1 if n - 1 >= all_nonzero else max(0, places - 2)


class _Gate:
    def __init__(self, world: _World, gate: Gate, count: int, knobs: dict[str, Any], rng: random.Random) -> None:
        self.env = world.env
        self.count = count
        self.arrived = 0
        self.opened = self.env.event()
        not_before = gate.timer(knobs, rng) if gate.timer else 0.0
        self.poll_s = gate.poll_s
        tick = float(knobs[gate.tick_ms]) / 1e3 if gate.tick_ms else 0.0
        self.env.process(self._open(not_before, tick, rng))
        self.all_here = self.env.event()

    def arrive(self) -> simpy.Event:
        self.arrived += 1
        if self.arrived == self.count and not self.all_here.triggered:
            self.all_here.succeed()
        return self.opened

    def _open(self, not_before: float, tick: float, rng: random.Random) -> Proc:
        yield self.all_here
        if self.env.now < not_before:
            yield self.env.timeout(not_before - self.env.now)
        if tick > 0:
            phase = rng.uniform(0, tick)  # the coordinator's ticks run on their own clock
            yield self.env.timeout((phase - self.env.now) % tick)
        if self.poll_s > 0:  # the deciding member's next poll
            yield self.env.timeout(rng.uniform(0, self.poll_s))
        self.opened.succeed()


def replay(
    protocol: Protocol,
    costs: Costs,
    machine: Machine,
    *,
    n: int,
    actors: list[int],
    finishers: list[int],
    processes: int,
    knobs: dict[str, Any],
    seed: int = 0,
) -> Outcome:
    """One operation of ``protocol``'s steps at ``n`` participants."""
    rng = random.Random(seed)
    world = _World(machine, n, processes, costs.serving_threads)
    env = world.env
    gates = [_Gate(world, g, len(actors), knobs, rng) for g in protocol.gates]
    declared = max(1, protocol.requests(n))
    scale = costs.requests / declared  # segments per declared request (polls, coalescing, replies)
    shares = sum(s.share for s in protocol.steps if not s.relay) or 1.0
    done: dict[int, float] = {}

    def participant(i: int) -> Proc:
        if machine.arrival_s > 0:
            yield env.timeout(rng.uniform(0, machine.arrival_s))
        for step in protocol.steps:
            if step.relay:
                yield from relayed(i, step)
                continue
            nbytes = costs.bytes * step.share / shares
            client = costs.client_s / declared + costs.client_per_byte_s * nbytes
            request_s = scale * costs.server_per_request_s
            reply_s = costs.server_per_byte_s * nbytes
            yield from world.cpu(i, client)
            yield from world.wire(nbytes / 2)
            if step.gate >= 0:  # the reply is a write of its own, made when the gate opens
                yield from world.serve(request_s / 2)
                yield gates[step.gate].arrive()
                yield from world.serve(request_s / 2 + reply_s)
            else:
                yield from world.serve(request_s + reply_s)
            yield from world.wire(nbytes / 2)
        done[i] = env.now

    def relayed(i: int, step: Step) -> Proc:
        """A value read from a member above in the relay tree: each level a round trip and
        the value sent to each of a relay's children in turn; then reading it."""
        value = step.relay_bytes(n, knobs) if step.relay_bytes else 0.0
        yield env.timeout(relay_depth(i, step.relay) * (machine.rtt_s + step.relay * value / machine.bandwidth_bytes_s))
        yield from world.cpu(i, costs.client_per_byte_s * value)

    for i in actors:
        env.process(participant(i))
    if costs.heartbeat_s > 0:
        env.process(_heartbeats(world, len(actors), costs, lambda: len(done) >= len(actors)))
    env.run()
    return Outcome.of([done[i] for i in finishers if i in done])


HEARTBEAT_BATCH_S = 0.01
"""The participants' heartbeats are served in batches of this many seconds' worth (one
event each: at 16K participants a second holds 16K heartbeats)."""


def _heartbeats(world: _World, n: int, costs: Costs, finished: Any) -> Proc:
    """The coordinator serving ``n`` participants' heartbeats while the operation runs."""
    per_batch = n * HEARTBEAT_BATCH_S / costs.heartbeat_s * costs.server_per_request_s
    while not finished():
        yield world.env.timeout(HEARTBEAT_BATCH_S)
        yield from world.serve(per_batch, priority=-1)


def race(
    protocol: Protocol,
    costs: RaceCosts,
    machine: Machine,
    *,
    n: int,
    agents: list[int],
    processes: int,
    knobs: dict[str, Any],
    first_round: bool,
    seed: int = 0,
) -> Outcome:
    """torchrun's rendezvous: ``agents`` join a round of min ``len(agents)``..max ``n``
    agents by compare-and-set on one pickled state (docstring of the module)."""
    rng = random.Random(seed)
    world = _World(machine, n, processes, costs.serving_threads)
    env = world.env
    size = len(agents)
    state = {"version": 0, "k": 0}
    complete = env.event()
    not_before = protocol.gates[0].timer(knobs, rng) if protocol.gates and protocol.gates[0].timer else 0.0
    last_call = float(knobs.get("rdzv_last_call_s", 1.0)) if size < n else 0.0
    done: dict[int, float] = {}

    def call(who: int, k_send: int, cas: bool, expect: int) -> Proc:
        """One request carrying ``k_send`` entries; returns (succeeded, entries now)."""
        out_bytes = costs.bytes_per_entry * k_send
        fixed = costs.client_per_attempt_s if cas else 0.0
        yield from world.cpu(who, fixed + costs.client_per_entry_s * k_send / 2)  # pickle what is sent
        yield from world.wire(out_bytes)
        ok = cas and state["version"] == expect
        k_now = state["k"] + (1 if ok else 0)
        serve = costs.server_per_request_s + costs.server_per_byte_s * (out_bytes + costs.bytes_per_entry * k_now)
        yield from world.serve(serve)
        ok = cas and state["version"] == expect  # decided when served: FIFO on the serving thread
        if ok:
            state["version"] += 1
            state["k"] += 1
            if state["k"] == size:
                env.process(_complete())
        seen = state["k"]
        yield from world.wire(costs.bytes_per_entry * seen)
        yield from world.cpu(who, costs.client_per_entry_s * seen / 2)  # unpickle what came back
        return ok, seen, state["version"]

    def _complete() -> Proc:
        # A dead agent's keep-alives must expire before the round counts without it; the
        # last call runs from then.
        if not_before > env.now:
            yield env.timeout(not_before - env.now)
        if last_call > 0:
            yield env.timeout(last_call)
        if not complete.triggered:
            complete.succeed(env.now)

    def agent(i: int) -> Proc:
        start = rng.uniform(0, machine.arrival_s) + (rng.uniform(*RENDEZVOUS_JITTER_S) if first_round else 0.0)
        if start > 0:
            yield env.timeout(start)
        _, k, version = yield from call(i, 0, False, -1)  # sync: read the state
        while True:
            ok, k, new = yield from call(i, k + 1, True, version)
            if ok:
                break
            version = new
        if state["k"] == size and last_call == 0 and not_before <= env.now and complete.triggered:
            done[i] = env.now  # its own write completed the round
            return
        while True:
            yield env.timeout(RENDEZVOUS_POLL_S)
            _, k, _ = yield from call(i, 0, False, -1)
            if complete.triggered:
                done[i] = env.now
                return

    for i in agents:
        env.process(agent(i))
    env.run()
    return Outcome.of([done[i] for i in agents if i in done])
