"""Closed forms of the simulation (:mod:`bench.scale.model.sim`), for sizes whose events
would take it more than minutes (131,072 participants, a race of N^2 attempts). The
simulation checks them where both reach (``tests/unit/test_scale_model.py``).

**Steps and gates.** A participant's requests are split into phases at the gates. In a
phase, every participant starting together, the last is through after the phase's
*bottleneck*: the largest of a participant's own path through it (its work, round
trips and service: the latency L), the coordinator's work for everyone (W, on its
serving thread), everyone's own work where they share (U over the interpreter locks, and
U + W over the cores, where the coordinator shares them), and the bytes over the
coordinator's NIC. The bottleneck's work is spread evenly over the phase, so the q-th
quantile of participants is through at L + q (T - L). A gate opens when the last
arrived (and its timer, and half a tick on average); it is answered one participant at
a time, so the answers are spread over the coordinator's reply work for all.

**The race.** Agents arrive over the jitter; while m of them contend with k in the
state, each success takes a generation: the coordinator serving the m compare-and-sets
queued (m x its service for k entries), or the fastest loser's turnaround (reading the
state that won, writing its own), or, where they share cores, the contenders' reading
and writing in turn over those cores until one holding the newest state is through
(half of them, on average: the simulation agrees within 15 % from 256 agents, below
which the simulation answers). One success a generation, N of them, in O(N) arithmetic.
Agents already in poll every second; the round is seen at each one's first poll after
it completes, and the last poll of all of them is served one after another.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bench.scale.model.machine import Machine
from bench.scale.model.protocols import RENDEZVOUS_JITTER_S, RENDEZVOUS_POLL_S, Protocol
from bench.scale.model.sim import Costs, RaceCosts, deepest_relay

Quantiles = tuple[float, float, float]


def _bound(
    machine: Machine, *, latency: float, client: float, server: float, nbytes: float, processes: int, threads: int = 1
) -> float:
    """The makespan of a phase that everyone goes through together (``server``: the
    coordinator's work, over its ``threads``)."""
    cands = [latency, server * machine.cpu_scale / threads, nbytes / machine.bandwidth_bytes_s]
    if machine.packed:
        cands.append(client * machine.cpu_scale / max(1, min(processes, machine.shared_cores or processes)))
    if machine.shared_cores:
        shared = client + (server if machine.coordinator_shares_cores else 0.0)
        cands.append(shared * machine.cpu_scale / machine.shared_cores)
    return max(cands)


def replay(
    protocol: Protocol,
    costs: Costs,
    machine: Machine,
    *,
    n: int,
    actors: int,
    processes: int,
    knobs: dict[str, Any],
) -> Quantiles:
    declared = max(1, protocol.requests(n))
    scale = costs.requests / declared
    # Heartbeats take this share of the coordinator's thread whatever the operation does.
    threads = max(1, costs.serving_threads)
    busy = (
        actors * costs.server_per_request_s * machine.cpu_scale / costs.heartbeat_s / threads
        if costs.heartbeat_s
        else 0.0
    )
    if busy >= 1:
        return math.inf, math.inf, math.inf  # it cannot keep up with the heartbeats alone
    slow = 1 / (1 - busy)  # the coordinator's work stretches by what the heartbeats leave it
    shares = sum(s.share for s in protocol.steps if not s.relay) or 1.0
    t = 0.0  # when the current phase started for everyone
    spread = machine.arrival_s  # the first phase's participants start over this long
    lat = client = server = nbytes = 0.0
    for step in protocol.steps:
        if step.relay:  # the last member, deepest in the tree; its own reading
            value = step.relay_bytes(n, knobs) if step.relay_bytes else 0.0
            depth = deepest_relay(n, step.relay)
            lat += depth * (machine.rtt_s + step.relay * value / machine.bandwidth_bytes_s)
            lat += costs.client_per_byte_s * value * machine.cpu_scale
            client += actors * costs.client_per_byte_s * value
            continue
        b = costs.bytes * step.share / shares
        c = costs.client_s / declared + costs.client_per_byte_s * b
        req = scale * costs.server_per_request_s
        rep = costs.server_per_byte_s * b
        lat += c * machine.cpu_scale + machine.rtt_s + (req + rep) * slow * machine.cpu_scale
        client += actors * c
        nbytes += actors * b
        if step.gate < 0:
            server += actors * (req + rep) * slow
            continue
        server += actors * req / 2 * slow
        gate = protocol.gates[step.gate]
        arrived = t + _bound(
            machine,
            latency=spread + lat,
            client=client,
            server=server,
            nbytes=nbytes,
            processes=processes,
            threads=threads,
        )
        opened = arrived
        if gate.timer is not None:
            opened = max(opened, _mean_timer(gate, knobs))
        if gate.tick_ms:
            opened += float(knobs[gate.tick_ms]) / 2e3
        opened += gate.poll_s / 2
        # Answered one by one: the next phase's participants start over the answers' span.
        t, spread = opened, actors * (req / 2 + rep) * slow * machine.cpu_scale / threads
        lat = client = server = nbytes = 0.0
    tail = _bound(
        machine, latency=spread + lat, client=client, server=server, nbytes=nbytes, processes=processes, threads=threads
    )
    if spread > 0 or tail > 0:
        first = t + lat
        last = t + tail
        return first + 0.5 * (last - first), first + 0.95 * (last - first), last
    return t, t, t


def _mean_timer(gate: Any, knobs: dict[str, Any]) -> float:
    import random

    draws = [gate.timer(knobs, random.Random(seed)) for seed in range(64)]
    return float(np.mean(draws))


def race(
    protocol: Protocol,
    costs: RaceCosts,
    machine: Machine,
    *,
    n: int,
    agents: int,
    knobs: dict[str, Any],
    first_round: bool,
) -> Quantiles:
    """The rendezvous race of ``agents`` into a round of at most ``n`` (module docstring)."""
    scale = machine.cpu_scale
    lo, hi = RENDEZVOUS_JITTER_S if first_round else (0.0, 0.0)
    hi += machine.arrival_s  # the sum of two uniforms, taken as one uniform over both spans
    arrive = lo + (hi - lo) * (np.arange(agents) + 0.5) / agents
    per_byte = costs.server_per_byte_s * costs.bytes_per_entry
    joined = np.empty(agents)
    t = 0.0
    for j in range(agents):
        k = j  # entries in the state the j-th success rewrites
        t = max(t, float(arrive[j]))
        m = max(1, int(np.searchsorted(arrive, t, side="right")) - j)  # contenders now
        s = (costs.server_per_request_s + per_byte * 2 * (k + 1)) * scale
        c = (costs.client_per_attempt_s + costs.client_per_entry_s * (k + 1)) * scale
        gen = max(m * s, c + machine.rtt_s + s, 2 * m * costs.bytes_per_entry * (k + 1) / machine.bandwidth_bytes_s)
        if machine.shared_cores:
            # Contenders redo their work in turn on the shared cores; the next success comes
            # once one holding the newest state is through, half a round of them on average.
            redo = m * (c + (s if machine.coordinator_shares_cores else 0.0)) / (2 * machine.shared_cores)
            gen = max(gen, redo)
        t += gen
        joined[j] = t
    complete = t
    last_call = float(knobs.get("rdzv_last_call_s", 1.0)) if agents < n else 0.0
    if protocol.gates and protocol.gates[0].timer is not None:
        complete = max(complete, _mean_timer(protocol.gates[0], knobs))
    complete += last_call
    # Each agent sees it at its first poll after `complete` (the last joiner at once, when no wait follows).
    polls = joined + np.ceil(np.maximum(complete - joined, 0) / RENDEZVOUS_POLL_S) * RENDEZVOUS_POLL_S
    read = (costs.server_per_request_s + per_byte * agents) * scale
    reading = costs.client_per_entry_s * agents * scale / 2
    served = agents * read  # every agent's last read of the whole state, one after another
    polls = polls + reading + machine.rtt_s + np.linspace(0, served, agents)
    if last_call == 0:
        polls[-1] = complete
    p50, p95 = np.percentile(polls, [50, 95])
    return float(p50), float(p95), float(polls.max()) if math.isfinite(polls.max()) else math.nan


def race_floor(costs: RaceCosts, machine: Machine, agents: int) -> float:
    """Seconds the race takes however the agents arrive: its successful writes come one
    at a time, each an agent's turnaround (writing k + 1 entries, the coordinator's
    compare-and-set, reading the state back), k from 0 to agents - 1."""
    k = np.arange(1, agents + 1, dtype=float)
    client = (costs.client_per_attempt_s + costs.client_per_entry_s * k) * machine.cpu_scale
    serve = (costs.server_per_request_s + costs.server_per_byte_s * costs.bytes_per_entry * 2 * k) * machine.cpu_scale
    return float(np.sum(client + serve + machine.rtt_s))
