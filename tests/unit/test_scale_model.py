"""The model of the coordinators (bench/scale/model) on made-up scale runs whose demand is
known: the fits recover it, the closed forms agree with the simulation they stand in
for, gates and timers hold, the race contends, and bad settings are refused by name."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

from bench.rank import relay
from bench.scale import rundir, spec
from bench.scale.model import demand, machine, report, sim
from bench.scale.model.predict import Model, workers
from bench.scale.model.protocols import PROTOCOLS
from bench.scale.records import Record
from bench.scenario.config import ConfigError

SIZES = (8, 16, 32, 64, 128, 256)
SERVER_PER_REQUEST = 12e-6
SERVER_PER_BYTE = 2e-9
CLIENT_PER_PARTICIPANT = 90e-6
LOCK = {"threads": [1, 4, 16, 64, 256, 1024, 2048], "cpu_s_per_call": [8e-6, 6e-6, 7e-6, 12e-6, 22e-6, 40e-6, 50e-6]}


def _requests(c: str, op: str, n: int) -> float:
    p = PROTOCOLS[c, op]
    return float(p.requests(n)) if not p.race else 6.0


def _bytes(c: str, op: str, n: int) -> float:
    return 200.0 + (40.0 * n if any(s.share > 1 for s in PROTOCOLS[c, op].steps) else 0.0)


def made_up_run(root: Path, *, latency: float = 1.0) -> Path:
    """A scale run whose rows follow the module's constants: the server's CPU is
    SERVER_PER_REQUEST a request and SERVER_PER_BYTE a byte, a participant's own work
    CLIENT_PER_PARTICIPANT plus the interpreter lock's cost of its requests; latencies
    are ``latency`` x N ms (only the validation reads them)."""
    path = root / "scale" / "20261207T000000Z_model"
    path.mkdir(parents=True)
    info = {
        "created": "2026-12-07T00:00:00+00:00",
        "spec": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec.ScaleSpec(sizes=SIZES)).items()},
        "stops": [],
        "skipped": {},
        "machine": {"cpus": 2},
        "finished": True,
        "probes": {
            "interpreter_lock": LOCK,
            "rendezvous_state": {"bytes_per_entry": 80.0, "cpu_s_per_entry": 5e-6, "cpu_s_per_attempt": 2e-3},
        },
    }
    (path / rundir.INFO).write_text(json.dumps(info))
    lock = demand.LockCost.of(LOCK)
    for c, op in PROTOCOLS:
        for n in SIZES:
            w = workers(c, n)
            req = _requests(c, op, n) * n
            moved = _bytes(c, op, n) * n
            client = n * CLIENT_PER_PARTICIPANT + req * lock.at(n / w)
            ms = latency * n * 1e-3
            rundir.append(
                path,
                Record(
                    c, op, n, 0, n, done=n, p50_s=ms / 2, p95_s=ms * 0.95, all_s=ms,
                    server_run_s=SERVER_PER_REQUEST * req + SERVER_PER_BYTE * moved,
                    client_cpu_s=client, sent_bytes=moved / 2, received_bytes=moved / 2,
                    requests=req, workers=w,
                ),
            )  # fmt: skip
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Model:
    return Model.of(rundir.load(made_up_run(tmp_path_factory.mktemp("model"))))


def test_nnls_keeps_every_coefficient_at_or_above_zero() -> None:
    n = np.array([8.0, 16, 32, 64])
    x = np.column_stack([np.ones_like(n), n])
    coef, _ = demand.nnls(x, 5.0 - 0.01 * n)  # a falling line: no negative slope
    assert coef[1] == 0 and coef[0] > 0


def test_a_slope_the_data_do_not_support_is_not_extrapolated() -> None:
    n = [8, 16, 32, 64, 128, 256, 512, 1024]
    noisy = demand.Line.fit(n, [3.2, 3.1, 3.3, 3.2, 3.3, 3.2, 4.4, 3.3])  # one noisy size
    assert noisy.b == 0 and noisy.at(131_072) == pytest.approx(noisy.a)
    grows = demand.Line.fit(n, [2.0 * x for x in n])
    assert grows.at(1000) == pytest.approx(2000, rel=1e-6)


def test_the_interpreter_lock_cost_never_falls_as_threads_grow() -> None:
    lock = demand.LockCost.of(LOCK)
    costs = [lock.at(t) for t in (1, 2, 4, 8, 100, 2048, 10_000)]
    assert costs == sorted(costs) and costs[0] == 8e-6 and costs[-1] == 50e-6
    assert not demand.LockCost.of({}).measured and demand.LockCost.of({}).at(500) == 0


def test_the_fits_recover_the_demand_the_run_was_made_with(model: Model) -> None:
    libuv = model.demand.servers["tcpstore-libuv"]
    assert libuv.per_request_s == pytest.approx(SERVER_PER_REQUEST, rel=0.02)
    assert libuv.per_byte_s == pytest.approx(SERVER_PER_BYTE, rel=0.05)
    barrier = model.demand.op("tcpstore-libuv", "barrier")
    assert barrier is not None
    assert barrier.requests.at(100_000) == pytest.approx(3.0)  # constant: the protocol's three requests
    # The interpreter lock's part of the participants' CPU is taken out; what is left is theirs.
    assert barrier.client_s == pytest.approx(CLIENT_PER_PARTICIPANT, rel=0.05)
    tree = model.demand.op("nvrx", "tree")
    assert tree is not None and tree.bytes_out.b == pytest.approx(20.0)  # every rank's state, read by each


@pytest.mark.parametrize("where", ["here", "cluster"])
@pytest.mark.parametrize("op", [f"{c}/{o}" for c, o in PROTOCOLS])
def test_the_closed_forms_agree_with_the_simulation(model: Model, where: str, op: str) -> None:
    """Each protocol at two sizes: the closed form's `all` within 25 % of the replay's (the
    race's replay grows as N^2: 256 agents is past the onset of its contention here)."""
    m = model.here() if where == "here" else machine.CLUSTER
    c, o = op.split("/")
    for n in (64, 256 if PROTOCOLS[c, o].race else 512):
        simulated = model.predict(c, o, n, m, method="simulation")
        formed = model.predict(c, o, n, m, method="closed form")
        assert formed.all_s == pytest.approx(simulated.all_s, rel=0.25), (c, o, n)


def test_the_relay_tree_is_the_membership_protocol_s_own() -> None:
    """The model's hops to a member are bench.rank.relay's, the deepest too."""

    def hops(rank: int) -> int:
        count = 0
        while (up := relay.parent(rank, relay.FANOUT)) != 0:
            rank, count = up, count + 1
        return count

    assert all(sim.relay_depth(r, relay.FANOUT) == hops(r) for r in range(1, 5000))
    for n in (2, 33, 1057, 16_384, 131_072):
        assert sim.deepest_relay(n, relay.FANOUT) == max(hops(r) for r in range(1, n))


def test_a_gate_waits_for_its_timer(model: Model) -> None:
    """The lighthouse cannot fail over before the dead group's heartbeat has expired."""
    timeout = float(model.knobs["lh_heartbeat_timeout_ms"]) / 1e3
    interval = float(model.knobs["lh_heartbeat_ms"]) / 1e3
    p = model.predict("lighthouse", "failover", 16, machine.CLUSTER)
    assert timeout - interval <= p.p50_s <= p.all_s < timeout + 1.0


def test_the_rendezvous_race_contends_where_agents_arrive_together(model: Model) -> None:
    """Arriving together, N agents rewrite the state about N^2 / 2 times; spread over a
    long launch, each writes once and the round completes soon after the last arrives."""
    together = model.predict("rendezvous", "form", 256, machine.CLUSTER)
    spread = model.predict("rendezvous", "form", 256, replace(machine.CLUSTER, arrival_s=30.0))
    assert together.all_s > 10 * model.predict("rendezvous", "form", 16, machine.CLUSTER).all_s / 16 * 16 / 10
    assert spread.all_s == pytest.approx(30.0 + 0.3 + 1.0, abs=1.5)  # the launch, the jitter, a last poll


def test_a_cluster_that_cannot_keep_up_with_heartbeats_is_said_so(model: Model) -> None:
    slow = replace(machine.CLUSTER, cpu_scale=200.0)  # heartbeats alone outrun the lighthouse
    assert math.isinf(model.predict("lighthouse", "quorum", 131_072, slow).all_s)


def test_a_bad_machine_setting_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="rtt_s"):
        machine.check(machine.CLUSTER, "rtt_s=-1")
    with pytest.raises(ConfigError, match="nodes"):
        machine.check(machine.CLUSTER, "nodes=3")
    changed = machine.check(machine.CLUSTER, "rtt_s=250e-6")
    assert changed.rtt_s == 250e-6 and ("rtt_s", "--set") in changed.sources


def test_the_validation_says_which_points_miss(tmp_path: Path) -> None:
    # Latencies 1,000 times the model's: every point a miss, each named in the verdict.
    m = Model.of(rundir.load(made_up_run(tmp_path, latency=1000.0)))
    table = report.validation(m)
    assert set(table["N"]) == {64, 128, 256}
    assert (table["verdict"] == "MISS").all()
    line = report.validation_verdict(table)
    assert line.startswith(f"0 of {len(table)} points within 30%") and "tcpstore-libuv/barrier" in line
