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
participant count and w0 the run's world size. f is, by default (``control_plane =
"model"``), the scale run's coordinator replayed on a cluster by the model of its
protocol (:class:`ModelCurve`, :mod:`bench.scale.model`): a CPU for each participant,
the coordinator on a host of its own, a network between, its demand calibrated by the
run. The run's own curve (fitted, past the largest count measured its extrapolation) is
the other side: its participants shared 2 cores, so it is an upper bound on the time, and
the band reaches down to the share of wall time it gives. With ``control_plane =
"measured"`` the curve is that fit alone, as before the model. The output marks what was
extrapolated and says where and why the scale run stopped (a protocol that failed at
that size, or this machine's limit). :data:`bench.scale.coordinators.STANDS_FOR` says
which operation stands for which phase.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bench.project.assumptions import TargetCluster
from bench.project.model import Growth, Scaling
from bench.scale.coordinators import BORROWED, COORDINATORS, STANDS_FOR
from bench.scale.curves import curve
from bench.scale.model.machine import CLUSTER, Machine
from bench.scale.model.predict import Model
from bench.scale.records import Stop
from bench.scale.rundir import ScaleRun

FIGURE = "all_s"
"""The curve a phase is scaled by: when every participant had its result."""


def counter(unit: str, cluster: TargetCluster) -> Callable[[float], float]:
    """Participants of a coordinator in a job of so many GPUs."""
    if unit == "rank":
        return float
    return lambda gpus: float(cluster.hosts(max(1, round(gpus))))


LONGEST_S = 1e9
"""Seconds a phase is held at where the model's coordinator cannot keep up at all (its
heartbeats alone outrun it): a share of wall time must stay a number."""


@dataclass
class ModelCurve:
    """A phase's growth read off the model of its coordinator on a cluster: ``all`` (the
    last participant's result) at the participants of a job of so many GPUs. Closed forms
    (milliseconds a size; the simulation checks them in the tests) so that the plot's
    dense grid stays quick. No resampling: its uncertainty is the band down to the run's
    own curve, not a bootstrap."""

    model: Model
    machine: Machine
    coordinator: str
    op: str
    count: Callable[[float], float]
    label: str
    cache: dict[float, float] = field(default_factory=dict)

    def x(self, gpus: float) -> float:
        return float(self.count(gpus))

    def value(self, participants: float) -> float:
        n = max(2, round(participants))
        if n not in self.cache:
            p = self.model.predict(self.coordinator, self.op, n, self.machine, method="closed form")
            self.cache[n] = min(p.all_s, LONGEST_S) if math.isfinite(p.all_s) else LONGEST_S
        return self.cache[n]

    def coefs(self, rng: np.random.Generator | None, replicates: int) -> tuple[np.ndarray, np.ndarray]:
        rows = 1 if rng is None else replicates
        return np.zeros(rows), np.zeros(rows)

    def shift(self, coefs: tuple[np.ndarray, np.ndarray], w0: float, n: float) -> np.ndarray:
        gain = max(0.0, self.value(self.x(n)) - self.value(self.x(w0)))
        return np.full(len(coefs[0]), gain)

    def describe(self) -> str:
        return f"{self.label}: the model of its protocol on a {self.machine.name}"


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
    scaling: Growth
    """What the projection shifts the phase by: the model, or the run's curve."""
    measured: Scaling
    """The run's own curve (its participants on 2 cores)."""
    max_n: int
    stop: Stop | None
    borrowed: str = ""

    def at(self, gpus: float) -> tuple[float, float, bool]:
        """(participants, seconds on the measured curve, extrapolated) for ``gpus`` GPUs."""
        x = self.measured.x(gpus)
        return x, self.measured.choice.fit.predict(x), x > self.max_n

    def describe(self, gpus: float, phase: str = "") -> str:
        x, v, beyond = self.at(gpus)
        unit = self.unit if x == 1 else f"{self.unit}s" if self.unit != "replica group" else "replica groups"
        where = f"extrapolated past {self.max_n:,}" if beyond else "within the sizes measured"
        into = phase if phase and phase != self.phase else ""
        name = f"{self.phase} (in {into})" if into else self.phase
        bound = "an upper bound"
        model = self.scaling.value(x) if isinstance(self.scaling, ModelCurve) else math.nan
        if beyond and v < model:  # a growth too shallow for the sizes measured: not a bound out there
            bound = f"below the model: its {self.measured.choice.fit.model} fit bounds only the sizes measured"
        measured = f"{v:.3g} s measured on 2 cores ({where}; {bound})"
        head = f"{name} ← {self.coordinator}/{self.op} at {x:,.0f} {unit}"
        if isinstance(self.scaling, ModelCurve):
            return f"{head}: {model:.3g} s on a cluster (model); {measured}"
        return f"{head}: {measured}"


def phases(
    run: ScaleRun, cluster: TargetCluster, *, source: str = "model", machine: Machine = CLUSTER
) -> dict[tuple[str, str], ControlPhase]:
    """(strategy, phase) -> the curve that scales it, for every one the run measured:
    the model on ``machine`` (``source = "model"``) or the run's own fit."""
    out: dict[tuple[str, str], ControlPhase] = {}
    model = Model.of(run) if source == "model" else None
    for (coordinator, op), targets in STANDS_FOR.items():
        c = curve(run, coordinator, op, FIGURE)
        if c is None or coordinator not in COORDINATORS:
            continue
        unit = COORDINATORS[coordinator].unit
        stop = next((s for s in run.stops if s.coordinator == coordinator and s.op in (op, "")), None)
        label = f"control plane {coordinator}/{op} ({unit}s, from {run.tag})"
        measured = Scaling(
            c.choice, np.asarray(c.n, dtype=float), np.asarray(c.y, dtype=float), counter(unit, cluster), True, label
        )
        scaling: Growth = measured
        if model is not None and model.covers(coordinator, op):
            scaling = ModelCurve(model, machine, coordinator, op, counter(unit, cluster), label)
        for strategy, phase, fallback in targets:
            out[strategy, phase] = ControlPhase(
                strategy,
                phase,
                fallback,
                coordinator,
                op,
                unit,
                scaling,
                measured,
                c.max_n,
                stop,
                BORROWED.get(strategy, ""),
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
    modelled = [u for u in used if isinstance(u.scaling, ModelCurve)]
    how = (
        f"the model of each coordinator's protocol on a {modelled[0].scaling.machine.name}, calibrated by the "
        f"scale run {run.path}; the band reaches down to the run's own curves (participants on 2 cores: an "
        "upper bound on the time)"
        if modelled and isinstance(modelled[0].scaling, ModelCurve)
        else f"the scale run {run.path}'s own curves (control_plane = measured)"
    )
    out = [
        f"Control-plane phases from {how}; the time until every participant had its result, read at the "
        "cluster's participants (replica groups taken as one per host): "
        + "; ".join(f"{u.strategy} {u.phase} ← {u.coordinator}/{u.op}" for u in used)
        + "."
    ]
    largest = max(cluster.gpus)
    for u in {(u.coordinator, u.op): u for u in used}.values():
        x, _, beyond = u.at(largest)
        if beyond:
            out.append(
                f"{u.coordinator}/{u.op} was measured up to {u.max_n:,} {u.unit}s; at {largest:,} GPUs "
                f"({x:,.0f}) its curve is the fitted {u.measured.choice.fit.model} model's extrapolation."
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
