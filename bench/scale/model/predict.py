"""An operation's p50, p95 and ``all`` at N participants on a machine, from a scale run:
its demand (:mod:`bench.scale.model.demand`), the protocol (:mod:`bench.scale.model.protocols`)
and the machine (:mod:`bench.scale.model.machine`), replayed by the simulation where its
events stay within :data:`SIM_EVENTS`, else by the closed forms (:mod:`bench.scale.model.closed`)
that the simulation checks where both reach.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from bench.scale.coordinators import COORDINATORS
from bench.scale.driver import PER_WORKER
from bench.scale.model import closed, sim
from bench.scale.model.demand import Demand, OpDemand, fit
from bench.scale.model.machine import Machine, this_machine
from bench.scale.model.protocols import POLLS_EVERY_CONNECTION, PROTOCOLS, Protocol, serving_threads
from bench.scale.rundir import ScaleRun

SIM_EVENTS = 120_000
"""Events a replay may take (a second or two of simpy); above, the closed forms answer
(simpy's resource queues are lists: with thousands of participants queued at the
coordinator each request costs O(N), and a replay of 16K took a minute)."""
EVENTS_PER_REQUEST = 12
RENDEZVOUS_BYTES_PER_ENTRY = 80.0
"""torch's pickled, base64 rendezvous state per agent, where a run has no probe (the
probe measured 79.6 bytes with torch 2.13.0)."""

Method = Literal["simulation", "closed form"]


@dataclass(frozen=True, slots=True)
class Prediction:
    p50_s: float
    p95_s: float
    all_s: float
    method: Method


@dataclass
class Model:
    """Everything the model takes from one scale run."""

    run: ScaleRun
    demand: Demand
    knobs: dict[str, Any]
    race_probe: dict[str, Any]
    seen: dict[tuple[Any, ...], Prediction] = field(default_factory=dict)
    """Predictions made (a page asks for the same ones for its text and its Markdown)."""

    @staticmethod
    def of(run: ScaleRun) -> Model:
        probe = run.info.get("probes", {}).get("rendezvous_state", {})
        return Model(run=run, demand=fit(run), knobs=run.spec.knobs(), race_probe=probe if "error" not in probe else {})

    @property
    def cores(self) -> int:
        return int(self.run.info.get("machine", {}).get("cpus") or 2)

    def here(self) -> Machine:
        return this_machine(self.cores)

    def covers(self, coordinator: str, op: str) -> bool:
        return (coordinator, op) in PROTOCOLS and self.demand.op(coordinator, op) is not None

    def predict(
        self, coordinator: str, op: str, n: int, machine: Machine, *, method: Method | None = None, seed: int = 0
    ) -> Prediction:
        """p50, p95 and all of ``coordinator``/``op`` at ``n`` on ``machine``: replayed while
        its events stay within SIM_EVENTS, else the closed form (``method`` forces one)."""
        key = (coordinator, op, n, machine, method, seed)
        if key not in self.seen:
            self.seen[key] = self._predict(coordinator, op, n, machine, method=method, seed=seed)
        return self.seen[key]

    def _predict(
        self, coordinator: str, op: str, n: int, machine: Machine, *, method: Method | None, seed: int
    ) -> Prediction:
        protocol = PROTOCOLS[coordinator, op]
        d = self.demand.op(coordinator, op)
        if d is None:
            raise KeyError(f"{coordinator}/{op}: not measured in {self.run.tag}")
        c = COORDINATORS[coordinator]
        o = c.op(op)
        victim = n - 1
        actors = [i for i in range(n) if not (o.victim and i == victim and not c.victim_runs)]
        finishers = [i for i in actors if not (o.victim and i == victim)]
        processes = workers(coordinator, n) if machine.packed else n
        first = op == "form"
        if protocol.race:
            race = self.race_costs(coordinator, machine)
            if method == "simulation" or (method is None and self._race_events(len(actors)) <= SIM_EVENTS):
                out = sim.race(
                    protocol,
                    race,
                    machine,
                    n=n,
                    agents=actors,
                    processes=processes,
                    knobs=self.knobs,
                    first_round=first,
                    seed=seed,
                )
                return Prediction(out.p50_s, out.p95_s, out.all_s, "simulation")
            r = closed.race(protocol, race, machine, n=n, agents=len(actors), knobs=self.knobs, first_round=first)
            return Prediction(*r, "closed form")
        costs = self.costs(d, protocol, n, n / processes if machine.packed else 1.0, machine)
        if method == "simulation" or (method is None and self._events(protocol, n) <= SIM_EVENTS):
            out = sim.replay(
                protocol,
                costs,
                machine,
                n=n,
                actors=actors,
                finishers=finishers,
                processes=processes,
                knobs=self.knobs,
                seed=seed,
            )
            return Prediction(out.p50_s, out.p95_s, out.all_s, "simulation")
        r = closed.replay(protocol, costs, machine, n=n, actors=len(actors), processes=processes, knobs=self.knobs)
        return Prediction(*r, "closed form")

    def costs(self, d: OpDemand, protocol: Protocol, n: int, threads: float, machine: Machine) -> sim.Costs:
        """The operation's costs at ``n``, its participants ``threads`` to a process."""
        server = COORDINATORS[d.coordinator].server
        cost = self.demand.servers.get(server)
        if cost is None:
            raise KeyError(f"{server}: no operation of it measured in {self.run.tag}")
        connections = n * COORDINATORS[d.coordinator].connections
        if server not in POLLS_EVERY_CONNECTION and not machine.coordinator_shares_cores:
            connections = 0  # no per-connection work where nothing polls them (POLLS_EVERY_CONNECTION)
        requests = d.requests.at(n)
        heartbeat = float(self.knobs[protocol.heartbeat_ms]) / 1e3 if protocol.heartbeat_ms else 0.0
        if heartbeat:  # the run's segments hold the heartbeats of the whole operation: the model adds its own
            requests = float(protocol.requests(n))
        return sim.Costs(
            client_s=d.client_s + requests * self.demand.lock.at(threads),
            client_per_byte_s=d.client_per_byte_s,
            server_per_request_s=cost.per_request_s + cost.per_request_connection_s * connections,
            server_per_byte_s=cost.per_byte_s,
            bytes=d.bytes_at(n),
            requests=requests,
            serving_threads=serving_threads(server, machine.coordinator_cores),
            heartbeat_s=heartbeat,
        )

    def race_costs(self, coordinator: str, machine: Machine) -> sim.RaceCosts:
        server = COORDINATORS[coordinator].server
        cost = self.demand.servers[server]
        per_entry = float(self.race_probe.get("bytes_per_entry", RENDEZVOUS_BYTES_PER_ENTRY))
        if "cpu_s_per_entry" in self.race_probe:
            cpu = float(self.race_probe["cpu_s_per_entry"])
            attempt = float(self.race_probe.get("cpu_s_per_attempt", 0.0))
        else:  # no probe: the operation's own work per request and per byte it moved
            form = self.demand.op(coordinator, "form")
            cpu = (form.client_per_byte_s if form else 0.0) * 2 * per_entry
            attempt = form.client_s / max(form.requests.at(min(form.sizes)), 1.0) if form else 0.0
        return sim.RaceCosts(
            bytes_per_entry=per_entry,
            client_per_entry_s=cpu,
            client_per_attempt_s=attempt,
            server_per_request_s=cost.per_request_s,
            server_per_byte_s=cost.per_byte_s,
            serving_threads=serving_threads(server, machine.coordinator_cores),
        )

    @staticmethod
    def _events(protocol: Protocol, n: int) -> int:
        return n * len(protocol.steps) * EVENTS_PER_REQUEST

    @staticmethod
    def _race_events(agents: int) -> int:
        return agents * agents // 2 * EVENTS_PER_REQUEST + agents * 40


def workers(coordinator: str, n: int) -> int:
    """Processes ``ftbench scale`` spreads ``n`` participants of ``coordinator`` over
    (as :meth:`bench.scale.driver.Driver.workers_for`, at the usual descriptor limit)."""
    c = COORDINATORS[coordinator]
    want = max(2, math.ceil(n / PER_WORKER), math.ceil(n * c.descriptors / 10_000))
    return max(1, min(n, want, 8))
