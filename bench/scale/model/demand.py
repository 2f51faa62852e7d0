"""What each coordinator operation asks of the coordinator and of each participant,
fitted from a scale run's readings, apart from one another.

Three sources, each read where the other side does not distort it:

- **The coordinator's service**: the seconds its threads ran on a CPU (``schedstat``,
  ns; :func:`bench.scale.system.service`) against the requests it received (segments
  carrying data, the kernel's count) and the bytes it moved, over every operation and
  size measured on that server: on-CPU time is not stretched by the participants'
  work competing for the cores, only its busy wall time is. One line per server
  (:class:`ServerCost`): seconds a request, a byte, and a request per open connection
  (the legacy server polls every connection in one loop; libuv does not: on a cluster
  only the legacy server pays it, :data:`~bench.scale.model.protocols.POLLS_EVERY_CONNECTION`).
- **The protocol's traffic**: requests and bytes per participant against N
  (:class:`Line`, a + b N), over every size measured: what the protocol sends, which a
  faster or slower machine does not change (a compare-and-set race, whose retries do
  depend on timing, is replayed by the model instead: :mod:`bench.scale.model.protocols`).
- **A participant's own work**: the CPU seconds of the participants' processes during
  the operation, less what packing them cost: every request is a blocking call that
  gives up the process's interpreter lock and takes it back, which costs a thread
  packed with T - 1 others more CPU the larger T is (the run's ``interpreter_lock``
  probe, :class:`LockCost`: here 7 µs a call at 4 threads, 44 µs at 1,024). What is
  left, a + b x (bytes it moved) per participant plus a fixed cost per process (the
  harness releasing and collecting its threads), is the protocol's; the model adds the
  packing back for a machine that packs (:mod:`bench.scale.model.machine`) and the cost
  of a blocking call of a thread alone for one that does not.

Every fit is non-negative least squares with relative errors (latencies and loads span
orders of magnitude), over the subsets of its terms (a handful), the best that keeps
every coefficient at or above zero: a cost is not assumed to fall as N grows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bench.scale import growth
from bench.scale.coordinators import COORDINATORS
from bench.scale.rundir import ScaleRun


def nnls(x: np.ndarray, y: np.ndarray, *, relative: bool = True) -> tuple[np.ndarray, float]:
    """Non-negative least squares over the subsets of the columns of ``x`` (there are
    few): the best fit whose coefficients are all >= 0, and its weighted residual sum."""
    w = 1.0 / np.maximum(np.abs(y), 1e-12) if relative else np.ones_like(y)
    best: tuple[np.ndarray, float] = (np.zeros(x.shape[1]), float(np.sum((y * w) ** 2)))
    cols = range(x.shape[1])
    for k in range(1, x.shape[1] + 1):
        for subset in itertools.combinations(cols, k):
            a = x[:, subset] * w[:, None]
            coef, *_ = np.linalg.lstsq(a, y * w, rcond=None)
            if np.any(coef < 0):
                continue
            full = np.zeros(x.shape[1])
            full[list(subset)] = coef
            rss = float(np.sum((y * w - a @ coef) ** 2))
            if rss < best[1] - 1e-15:
                best = (full, rss)
    return best


@dataclass(frozen=True, slots=True)
class Line:
    """a + b N, never below zero."""

    a: float
    b: float

    def at(self, n: float) -> float:
        return max(0.0, self.a + self.b * n)

    @staticmethod
    def fit(n: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> Line:
        """Constant or a + b N by the rule growth curves are chosen by (AICc, relative
        errors, a slope must gain more than 2 and not fall): a slope the data do not
        support would be multiplied by 100,000 when the model is read at cluster sizes."""
        ns, ys = np.asarray(n, dtype=float), np.asarray(y, dtype=float)
        if not len(ys):
            return Line(0.0, 0.0)
        choice = growth.choose(ns.tolist(), np.maximum(ys, 0.0).tolist(), models=("constant", "linear"), relative=True)
        coef = choice.fit.coef
        return Line(max(float(coef[0]), 0.0), float(coef[1]) if len(coef) > 1 else 0.0)

    def describe(self, unit: str = "") -> str:
        a = f"{self.a:.3g}{unit}"
        return a if self.b == 0 else f"{a} + {self.b:.3g}{unit} x N"


@dataclass(frozen=True, slots=True)
class LockCost:
    """CPU seconds a blocking call costs a thread sharing its process's interpreter
    lock with T - 1 others (the ``interpreter_lock`` probe), between the T measured
    read linearly in log2 T, held flat beyond them and never falling as T grows."""

    threads: tuple[int, ...] = (1,)
    per_call_s: tuple[float, ...] = (0.0,)

    def at(self, threads: float) -> float:
        x = np.log2(np.maximum(np.asarray(self.threads, dtype=float), 1.0))
        y = np.maximum.accumulate(np.asarray(self.per_call_s, dtype=float))
        return float(np.interp(math.log2(max(threads, 1.0)), x, y))

    @staticmethod
    def of(probe: dict[str, object]) -> LockCost:
        t, c = probe.get("threads"), probe.get("cpu_s_per_call")
        if not isinstance(t, list) or not isinstance(c, list) or len(t) != len(c) or not t:
            return LockCost()
        return LockCost(tuple(int(x) for x in t), tuple(float(x) for x in c))

    @property
    def measured(self) -> bool:
        return len(self.threads) > 1


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerCost:
    """A server's on-CPU seconds for a request, a byte and a request per open connection."""

    server: str
    per_request_s: float
    per_byte_s: float
    per_request_connection_s: float
    rows: int
    """Operations-at-a-size it was fitted on."""

    def request(self, nbytes: float, connections: float) -> float:
        """Seconds of the server's CPU one request of ``nbytes`` costs with so many open."""
        return self.per_request_s + self.per_byte_s * nbytes + self.per_request_connection_s * connections


@dataclass(frozen=True, kw_only=True, slots=True)
class OpDemand:
    """One operation's demand per participant, as functions of N."""

    coordinator: str
    op: str
    requests: Line
    """Requests a participant sends the coordinator (kernel segments)."""
    bytes_in: Line
    """Bytes a participant sends it."""
    bytes_out: Line
    """Bytes it sends a participant (replies, notifications)."""
    client_s: float
    """A participant's own CPU seconds for the operation, apart from bytes and from the
    interpreter lock's cost of its blocking calls."""
    client_per_byte_s: float
    """... and for each byte it moves (unpickling what every other wrote, say)."""
    per_process_s: float
    """CPU seconds a participant process spends per operation whatever its participants."""
    sizes: tuple[int, ...]
    """Sizes the traffic was fitted on."""

    def client_at(self, n: float) -> float:
        return self.client_s + self.client_per_byte_s * (self.bytes_in.at(n) + self.bytes_out.at(n))

    def bytes_at(self, n: float) -> float:
        return self.bytes_in.at(n) + self.bytes_out.at(n)


@dataclass
class Demand:
    """Every operation's demand and every server's cost, from one scale run."""

    run: str
    ops: dict[tuple[str, str], OpDemand] = field(default_factory=dict)
    servers: dict[str, ServerCost] = field(default_factory=dict)
    lock: LockCost = field(default_factory=LockCost)

    def op(self, coordinator: str, op: str) -> OpDemand | None:
        return self.ops.get((coordinator, op))


def _readable(df: pd.DataFrame) -> pd.DataFrame:
    need = ["requests", "server_run_s", "client_cpu_s", "sent_bytes", "received_bytes"]
    keep = df.dropna(subset=need)
    return keep[keep["requests"] > 0]


def server_costs(df: pd.DataFrame) -> dict[str, ServerCost]:
    """Per server: on-CPU seconds = a x requests + b x bytes + c x requests x connections."""
    out: dict[str, ServerCost] = {}
    df = df.assign(server=[COORDINATORS[c].server if c in COORDINATORS else "" for c in df["coordinator"]])
    for server, g in df.groupby("server"):
        if not server or len(g) < 3:
            continue
        per = np.array([COORDINATORS[str(c)].connections for c in g["coordinator"]], dtype=float)
        conns = g["n"].to_numpy(dtype=float) * per * np.where(g["op"] == "connect", 0.5, 1.0)  # connect opens them
        req = g["requests"].to_numpy(dtype=float)
        x = np.column_stack([req, (g["sent_bytes"] + g["received_bytes"]).to_numpy(dtype=float), req * conns])
        coef, _ = nnls(x, g["server_run_s"].to_numpy(dtype=float))
        out[str(server)] = ServerCost(
            server=str(server),
            per_request_s=float(coef[0]),
            per_byte_s=float(coef[1]),
            per_request_connection_s=float(coef[2]),
            rows=len(g),
        )
    return out


GROWS = 0.5
"""A protocol's bytes per participant must grow by this share of their smallest-size
value over the sizes measured for a participant's work to be fitted per byte too (with
constant bytes a byte term is the per-participant term again, and would be a guess)."""


def _client(g: pd.DataFrame, moved_line: Line, lock: LockCost) -> tuple[float, float, float]:
    """(per participant, per byte, per process) of the participants' own work: their CPU
    less the interpreter lock's cost of every request at the threads a process held."""
    sizes = sorted(int(x) for x in g["n"].unique())
    n = g["n"].to_numpy(dtype=float)
    moved = (g["sent_bytes"] + g["received_bytes"]).to_numpy(dtype=float)
    workers = g["workers"].to_numpy(dtype=float)
    packing = np.array([lock.at(t) for t in n / np.maximum(workers, 1.0)]) * g["requests"].to_numpy(dtype=float)
    own = np.maximum(g["client_cpu_s"].to_numpy(dtype=float) - packing, 1e-6)
    grows = moved_line.b * max(sizes) > GROWS * max(moved_line.at(min(sizes)), 1.0)
    x = np.column_stack([workers, n, moved] if grows else [workers, n])
    coef, _ = nnls(x, own)
    return float(coef[1]), float(coef[2]) if grows else 0.0, float(coef[0])


def fit(run: ScaleRun) -> Demand:
    """Every operation's demand from the run's finished rows (each repetition a point)."""
    df = _readable(run.ok())
    lock = LockCost.of(run.info.get("probes", {}).get("interpreter_lock", {}))
    demand = Demand(run=run.tag, servers=server_costs(df), lock=lock)
    for (coordinator, op), g in df.groupby(["coordinator", "op"], sort=False):
        n = g["n"].to_numpy(dtype=float)
        bytes_in = Line.fit(n, g["received_bytes"].to_numpy(dtype=float) / n)
        bytes_out = Line.fit(n, g["sent_bytes"].to_numpy(dtype=float) / n)
        c, per_byte, per_process = _client(g, Line(bytes_in.a + bytes_out.a, bytes_in.b + bytes_out.b), lock)
        demand.ops[str(coordinator), str(op)] = OpDemand(
            coordinator=str(coordinator),
            op=str(op),
            requests=Line.fit(n, g["requests"].to_numpy(dtype=float) / n),
            bytes_in=bytes_in,
            bytes_out=bytes_out,
            client_s=c,
            client_per_byte_s=per_byte,
            per_process_s=per_process,
            sizes=tuple(sorted(int(x) for x in set(n.tolist()))),
        )
    return demand


def table(demand: Demand) -> pd.DataFrame:
    """Per operation, per participant: what it costs the coordinator and itself."""
    rows = []
    for d in demand.ops.values():
        server = COORDINATORS[d.coordinator].server if d.coordinator in COORDINATORS else ""
        cost = demand.servers.get(server)
        n0 = min(d.sizes)
        per_request_bytes = d.bytes_at(n0) / max(d.requests.at(n0), 1e-9)
        service = cost.request(per_request_bytes, n0) * d.requests.at(n0) if cost else math.nan
        rows.append(
            {
                "coordinator": d.coordinator,
                "op": d.op,
                "requests": d.requests.describe(),
                "bytes in": d.bytes_in.describe(" B"),
                "bytes out": d.bytes_out.describe(" B"),
                f"coordinator µs (N={n0})": f"{service * 1e6:.3g}",
                "participant µs": f"{d.client_s * 1e6:.3g}"
                + (f" + {d.client_per_byte_s * 1e9:.3g} ns/B" if d.client_per_byte_s else ""),
                "fitted on N": f"{min(d.sizes):,}-{max(d.sizes):,}",
            }
        )
    return pd.DataFrame(rows)
