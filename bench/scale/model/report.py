"""The model's tables beside a scale run: what each operation asks of each side, the
model configured as this machine against what the run measured, the model on a cluster
at 1K, 16K and 131K participants, and the published anchors against the cluster model.

The verdicts are fixed-width and said in the last line of each table, as nccl-tests
says its out-of-bounds count: a point of this machine is *within* when the model's
``all`` lies within :data:`WITHIN` of the measured one (at N >= :data:`VALIDATE_FROM`,
where the operation takes long enough for its structure, not a few milliseconds of
start-up, to decide it); an anchor that :attr:`~bench.scale.anchors.Anchor.check` is
*within 2x* of its published figure or *outside* (and the note says why).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from bench.report.tables import markdown, text_table
from bench.scale.anchors import ANCHORS, Anchor
from bench.scale.coordinators import COORDINATORS
from bench.scale.model import closed
from bench.scale.model import demand as dm
from bench.scale.model.machine import Machine
from bench.scale.model.predict import Model, Prediction
from bench.scale.model.protocols import POLLS_EVERY_CONNECTION, SERVING_THREADS

WITHIN = 0.30
VALIDATE_FROM = 64
ANCHOR_FACTOR = 2.0
CLUSTER_SIZES = (1_024, 16_384, 131_072)
SPREAD_CAP_S = 600.0
"""Longest arrival spread searched for a rendezvous anchor's implied launch."""


def seconds(v: float) -> str:
    if not math.isfinite(v):
        return ""
    if v < 1e-3:
        return f"{v * 1e6:.3g} µs"
    if v < 1:
        return f"{v * 1e3:.3g} ms"
    if v < 1e4:
        return f"{v:.3g} s"
    return f"{v / 3600:.3g} h"


def demand_table(model: Model) -> pd.DataFrame:
    return dm.table(model.demand)


def server_lines(model: Model) -> list[str]:
    out = []
    for s in model.demand.servers.values():
        threads, why = SERVING_THREADS.get(s.server, (1, ""))
        extra = (
            f" + {s.per_request_connection_s * 1e9:.3g} ns per request per open connection"
            + ("" if s.server in POLLS_EVERY_CONNECTION else " (on this machine only: nothing polls them)")
            if s.per_request_connection_s
            else ""
        )
        out.append(
            f"{s.server}: {s.per_request_s * 1e6:.3g} µs a request + {s.per_byte_s * 1e9:.3g} ns a byte{extra} "
            f"of its CPU (schedstat; {s.rows} operation-sizes); {threads} serving thread ({why})"
        )
    lock = model.demand.lock
    if lock.measured:
        pairs = ", ".join(f"{t:,}: {c * 1e6:.3g} µs" for t, c in zip(lock.threads, lock.per_call_s, strict=True))
        out.append(f"a blocking call of a thread packed with T - 1 others (interpreter lock), by T: {pairs}")
    else:
        out.append("no interpreter-lock probe in this run: the packing of participants costs nothing in the model")
    race = model.race_probe
    if race:
        out.append(
            f"torch's rendezvous state: {race.get('bytes_per_entry', 0):.3g} bytes and "
            f"{float(race.get('cpu_s_per_entry', 0)) * 1e6:.3g} µs a agent per attempt, "
            f"+ {float(race.get('cpu_s_per_attempt', 0)) * 1e3:.3g} ms an attempt (its event records' stack walks)"
        )
    return out


def validation(model: Model) -> pd.DataFrame:
    """Each operation at each size >= VALIDATE_FROM the run measured: measured against
    the model configured as this machine."""
    here = model.here()
    df = model.run.ok()
    rows = []
    for (coordinator, op), g in df.groupby(["coordinator", "op"], sort=False):
        c, o = str(coordinator), str(op)
        if not model.covers(c, o):
            continue
        for n, h in g.groupby("n"):
            if int(str(n)) < VALIDATE_FROM:
                continue
            measured = float(h["all_s"].median())
            p = model.predict(c, o, int(str(n)), here)
            ratio = p.all_s / measured if measured > 0 else math.nan
            rows.append(
                {
                    "coordinator": c,
                    "op": o,
                    "N": int(str(n)),
                    "measured p50": seconds(float(h["p50_s"].median())),
                    "model p50": seconds(p.p50_s),
                    "measured all": seconds(measured),
                    "model all": seconds(p.all_s),
                    "model / measured": f"{ratio:.2f}",
                    "verdict": "within" if abs(ratio - 1) <= WITHIN else "MISS",
                    "how": p.method,
                }
            )
    return pd.DataFrame(rows)


def validation_verdict(table: pd.DataFrame) -> str:
    if table.empty:
        return "no operation of this run was measured at 64 participants or more"
    hits = int((table["verdict"] == "within").sum())
    misses = table[table["verdict"] != "within"]
    line = f"{hits} of {len(table)} points within {WITHIN:.0%} of the measured all"
    if len(misses):
        worst = sorted({f"{r.coordinator}/{r.op}" for r in misses.itertuples()})
        line += f"; misses: {', '.join(worst)}"
    return line


def cluster_table(model: Model, machine: Machine, sizes: tuple[int, ...] = CLUSTER_SIZES) -> pd.DataFrame:
    rows = []
    for c, o in model.demand.ops:
        if not model.covers(c, o):
            continue
        row: dict[str, object] = {"coordinator": c, "op": o, "participant": COORDINATORS[c].unit}
        for n in sizes:
            p = model.predict(c, o, n, machine)
            row[f"N = {n:,}: p50 / p95 / all"] = f"{seconds(p.p50_s)} / {seconds(p.p95_s)} / {seconds(p.all_s)}"
        rows.append(row)
    return pd.DataFrame(rows)


def _implied_spread(model: Model, a: Anchor, machine: Machine) -> float | None:
    """The launch spread over which the cluster model meets a rendezvous anchor (bisection;
    the race's time falls as the agents spread out, the spread itself adds)."""
    assert a.published_s is not None

    def at(spread: float) -> float:
        return model.predict(a.coordinator, a.op, a.n, replace(machine, arrival_s=spread)).all_s

    if at(0.0) <= a.published_s:
        return 0.0
    lo, hi = 0.0, a.published_s
    if at(hi) > ANCHOR_FACTOR * a.published_s:
        return None
    for _ in range(30):
        mid = (lo + hi) / 2
        if at(mid) > a.published_s:
            lo = mid
        else:
            hi = mid
    return hi


def anchors_table(model: Model, machine: Machine) -> pd.DataFrame:
    rows = []
    for a in ANCHORS:
        if not model.covers(a.coordinator, a.op):
            continue
        p: Prediction = model.predict(a.coordinator, a.op, a.n, machine)
        ratio = p.all_s / a.published_s if a.published_s else math.nan
        if not a.check or not a.published_s:
            verdict = "reported"
        elif 1 / ANCHOR_FACTOR <= ratio <= ANCHOR_FACTOR:
            verdict = "within 2x"
        else:
            verdict = "OUTSIDE 2x"
        note = ""
        if a.coordinator == "rendezvous" and a.published_s and verdict == "OUTSIDE 2x":
            spread = _implied_spread(model, a, machine)
            floor = closed.race_floor(model.race_costs(a.coordinator, machine), machine, a.n)
            note = (
                f"agents arriving together (a re-rendezvous); the model meets {a.published_s:g} s when they "
                f"arrive over {spread:.2g} s of a launch"
                if spread is not None
                else f"no launch spread brings it within 2x: the {a.n:,} successful compare-and-sets are serial, "
                f"each an agent reading and writing the whole state: {seconds(floor)} however they arrive"
            )
        rows.append(
            {
                "published": a.what,
                "N": f"{a.n:,}",
                "their figure": a.published,
                f"model ({machine.name})": seconds(p.all_s),
                "model / published": f"{ratio:.2g}" if math.isfinite(ratio) else "",
                "verdict": verdict,
                "note": note,
            }
        )
    return pd.DataFrame(rows)


def text(model: Model, machine: Machine) -> str:
    v = validation(model)
    return "\n".join(
        [
            "What each operation asks of the coordinator and of a participant (per participant; docs/scale.md):",
            "",
            text_table(demand_table(model)),
            *(f"  {line}" for line in server_lines(model)),
            "",
            f"The model configured as this machine ({model.here().name}) against the run, N >= {VALIDATE_FROM}:",
            "",
            text_table(v),
            f"# Verdict: {validation_verdict(v)}",
            "",
            f"The model on a {machine.name}:",
            *(f"  {line}" for line in machine.describe()),
            "",
            text_table(cluster_table(model, machine)),
            "",
            f"Published figures against the model on a {machine.name}:",
            "",
            text_table(anchors_table(model, machine)),
        ]
    )


def markdown_sections(model: Model, machine: Machine) -> list[str]:
    v = validation(model)
    return [
        "## What each operation asks of each side",
        "",
        markdown(demand_table(model)),
        *(f"- {line}" for line in server_lines(model)),
        "",
        f"## The model configured as this machine, against this run (N >= {VALIDATE_FROM})",
        "",
        markdown(v),
        f"**{validation_verdict(v)}.**",
        "",
        f"## The model on a {machine.name}",
        "",
        *(f"- {line}" for line in machine.describe()),
        "",
        markdown(cluster_table(model, machine)),
        f"## Published figures against the model on a {machine.name}",
        "",
        markdown(anchors_table(model, machine)),
    ]
