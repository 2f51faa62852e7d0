"""The recovery phases that are control-plane work, scaled by what ``ftbench scale``
measured instead of by a 2-8-rank fit.

A phase such as torchrun's re-rendezvous or torchft's wait for a quorum without the dead
replica group is a coordinator serving every participant; the failure run measured it
with 1-8 participants, and a phase-scaling run fits it over 2-8 ranks. A scale run
measured the stack's own coordinator against 8 to thousands of participants: its curve
of the time until every participant had its result (``all``), fitted with the shared
rule (:mod:`bench.scale.growth`), is what the projection shifts such a phase by, read at
the participants the cluster has:

- ranks (N GPUs) for NVRx's in-process restart, reinit and torch-reconfigure;
- hosts (N / ``gpus_per_host``) for torchrun's and ft_launcher's agents;
- replica groups for torchft, taken as one per host (an assumption, printed: a group
  of more GPUs than a host makes fewer groups).

The phase at N is the failure run's own measured mean plus f(p(N)) - f(p(w0)), p the
participant count and w0 the run's world size. Past the largest count the scale run
measured, f is the fitted model's extrapolation: the output marks it, and says where and
why the scale run stopped (a protocol that failed at that size, or this machine's limit).
:data:`bench.scale.coordinators.STANDS_FOR` says which operation stands for which
phase.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bench.project.assumptions import TargetCluster
from bench.project.model import Scaling
from bench.scale.coordinators import BORROWED, COORDINATORS, STANDS_FOR
from bench.scale.curves import curve
from bench.scale.records import Stop
from bench.scale.rundir import ScaleRun

FIGURE = "all_s"
"""The curve a phase is scaled by: when every participant had its result."""


def counter(unit: str, cluster: TargetCluster) -> Callable[[float], float]:
    """Participants of a coordinator in a job of so many GPUs."""
    if unit == "rank":
        return float
    return lambda gpus: float(cluster.hosts(max(1, round(gpus))))


@dataclass(frozen=True)
class ControlPhase:
    """One strategy's phase, scaled by one coordinator operation's curve."""

    strategy: str
    phase: str
    fallback: str
    """Where its growth goes in a run without ``phase`` ("" for nowhere)."""
    coordinator: str
    op: str
    unit: str
    scaling: Scaling
    max_n: int
    stop: Stop | None
    borrowed: str = ""

    def at(self, gpus: float) -> tuple[float, float, bool]:
        """(participants, seconds on the curve, extrapolated) for a job of ``gpus`` GPUs."""
        x = self.scaling.x(gpus)
        return x, self.scaling.choice.fit.predict(x), x > self.max_n

    def describe(self, gpus: float, phase: str = "") -> str:
        x, v, beyond = self.at(gpus)
        unit = self.unit if x == 1 else f"{self.unit}s" if self.unit != "replica group" else "replica groups"
        where = f"extrapolated past {self.max_n:,}" if beyond else "within the sizes measured"
        into = phase if phase and phase != self.phase else ""
        name = f"{self.phase} (in {into})" if into else self.phase
        return f"{name} ← {self.coordinator}/{self.op}: {v:.3g} s at {x:,.0f} {unit} ({where})"


def phases(run: ScaleRun, cluster: TargetCluster) -> dict[tuple[str, str], ControlPhase]:
    """(strategy, phase) -> the curve that scales it, for every one the run measured."""
    out: dict[tuple[str, str], ControlPhase] = {}
    for (coordinator, op), targets in STANDS_FOR.items():
        c = curve(run, coordinator, op, FIGURE)
        if c is None or coordinator not in COORDINATORS:
            continue
        unit = COORDINATORS[coordinator].unit
        stop = next((s for s in run.stops if s.coordinator == coordinator and s.op in (op, "")), None)
        label = f"control plane {coordinator}/{op} ({unit}s, from {run.tag})"
        scaling = Scaling(
            c.choice, np.asarray(c.n, dtype=float), np.asarray(c.y, dtype=float), counter(unit, cluster), True, label
        )
        for strategy, phase, fallback in targets:
            out[strategy, phase] = ControlPhase(
                strategy, phase, fallback, coordinator, op, unit, scaling, c.max_n, stop, BORROWED.get(strategy, "")
            )
    return out


CPU_BOUND = 0.5
"""Share of the machine's cores the participants' own work took during an operation above
which the operation was bound by it (their CPU, not the coordinator)."""


def cpu_bound(run: ScaleRun, coordinator: str, op: str) -> str:
    """Why a curve is an upper bound, where the participants' own CPU bounded its largest
    point: on one machine their work shares its cores, on a cluster each has a host."""
    df = run.ok()
    rows = df[(df["coordinator"] == coordinator) & (df["op"] == op)]
    cores = float(run.info.get("machine", {}).get("cpus") or 0)
    if rows.empty or cores <= 0:
        return ""
    last = rows[rows["n"] == rows["n"].max()].iloc[0]
    wall, clients, server = float(last["all_s"]), float(last["client_cpu_s"]), float(last["server_cpu_s"])
    share = clients / (wall * cores) if wall > 0 else 0.0
    if not share >= CPU_BOUND:
        return ""
    return (
        f"at {int(last['n']):,} the participants used {clients:.3g} CPU-s of the {cores:g} cores in {wall:.3g} s "
        f"({100 * share:.0f} %; the coordinator {server:.3g} CPU-s): their own work bounded it, on shared cores "
        "here and on a host each on a cluster, so the curve is an upper bound"
    )


def notes(run: ScaleRun, used: list[ControlPhase], cluster: TargetCluster) -> list[str]:
    """What the projection took from the scale run, and where that run stopped."""
    if not used:
        return [f"Scale run {run.path}: none of its curves stands for a phase of this run's strategies."]
    out = [
        f"Control-plane phases scaled by the scale run {run.path} (time until every participant had its result, "
        "read at the cluster's participants; replica groups taken as one per host): "
        + "; ".join(f"{u.strategy} {u.phase} ← {u.coordinator}/{u.op}" for u in used)
        + "."
    ]
    largest = max(cluster.gpus)
    for u in {(u.coordinator, u.op): u for u in used}.values():
        x, _, beyond = u.at(largest)
        if beyond:
            out.append(
                f"{u.coordinator}/{u.op} was measured up to {u.max_n:,} {u.unit}s; at {largest:,} GPUs "
                f"({x:,.0f}) it is the fitted {u.scaling.choice.fit.model} model's extrapolation."
            )
        bound = cpu_bound(run, u.coordinator, u.op)
        if bound:
            out.append(f"{u.coordinator}/{u.op}: {bound}")
        if u.stop is not None:
            out.append(
                f"{u.coordinator}/{u.op} stopped at {u.stop.n:,} {u.unit}s in the scale run ({u.stop.limit}: "
                f"{u.stop.reason})."
            )
    out += sorted({f"{u.strategy}: {u.borrowed}" for u in used if u.borrowed})
    return out
