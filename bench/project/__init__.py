"""``ftbench project``: from a run's measured recovery to effective training time on a
cluster of thousands of GPUs, with every assumption said and a band, not a point.

Layer: above :mod:`bench.report` (whose plotting it shares) and :mod:`bench.results`.

- :mod:`bench.project.assumptions`: the cluster (sizes, failure rate, checkpoint cost
  and interval), defaults with their sources, TOML file and ``--set`` overrides;
- :mod:`bench.project.source`: the points of a run, reduced to recovered trials' phases;
- :mod:`bench.project.fit`: per-phase growth models fitted on a scaling run;
- :mod:`bench.project.control`: phases that are control-plane work, scaled by the curves
  of a scale run (``ftbench scale``) at the cluster's participant count;
- :mod:`bench.project.inputs`: each stack's measured fault-free tax and the seconds its
  checkpoint writes and restores take per byte of state;
- :mod:`bench.project.gpu`: the phases a GPU cluster adds to a recovery (communicators,
  a checkpoint load from storage, a replacement host), from published figures, and
  which stack pays which;
- :mod:`bench.project.model`: lost time per failure, effective fraction, bootstrap band;
- :mod:`bench.project.render`: the tables, the markdown page and the plot;
- :mod:`bench.project.published`: published effective-training-time figures from each
  paper's own inputs through :mod:`bench.project.model` (``ftbench project --published``).

The method, its limits and its sources are written up in ``docs/project.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from bench.project import control as ctl
from bench.project.assumptions import TargetCluster
from bench.project.fit import choose
from bench.project.inputs import Inputs
from bench.project.model import Growth, Projection, Scaling, project
from bench.project.source import cores, points, scaling_data
from bench.results.reader import Run
from bench.scale.rundir import ScaleRun


@dataclass
class Result:
    """Everything ``ftbench project`` shows: one projection per point, and notes."""

    run: Run
    cluster: TargetCluster
    projections: list[Projection]
    scaling: Run | None
    inputs: Inputs = field(default_factory=Inputs)
    notes: list[str] = field(default_factory=list)
    control: ScaleRun | None = None
    """The scale run control-plane phases were scaled by, if any."""
    control_used: list[ctl.ControlPhase] = field(default_factory=list)


def build(
    run: Run,
    cluster: TargetCluster,
    scaling: Run | None = None,
    *,
    inputs: Inputs | None = None,
    control: ScaleRun | None = None,
    replicates: int = 1000,
    seed: int = 0,
) -> Result:
    """Project every point of ``run`` onto ``cluster``; phases that are control-plane
    work grow as the ``control`` scale run measured their coordinator, the others as
    fitted on the ``scaling`` run where it measured them, and are constant otherwise."""
    notes: list[str] = []
    curves = ctl.phases(control, cluster, source=cluster.control_plane) if control is not None else {}
    used: dict[tuple[str, str], ctl.ControlPhase] = {}
    per_core = cluster.oversubscribed == "per-core"
    data = scaling_data(scaling, per_core) if scaling is not None else {}
    if scaling is None:
        notes.append(
            "No scaling run (--scaling): every phase is assumed constant in world size, and the band "
            "covers only the spread between this run's trials, not growth with scale."
        )
    else:
        sizes = sorted({int(w) for ws, _ in data.values() for w in ws})
        notes.append(
            f"Phase growth fitted on {scaling.path} at world sizes {sizes}, every rank on one machine: work a "
            "cluster does once per host (an agent starting its workers) was done once for all ranks there, so a "
            "phase that grows with it overstates growth at scale."
        )
        n_cores = cores(scaling)
        if n_cores and sizes and max(sizes) > n_cores and not per_core:
            notes.append(
                f"Ranks outnumber the measuring machine's {n_cores} cores above {n_cores} ranks: phases that "
                "compute in every rank (starting interpreters, importing, building the model) grow there "
                "because ranks share cores, which hosts of a cluster do not. A sloped fit of such a phase "
                "overstates its growth: read it as an upper bound (--set oversubscribed='per-core' gives the "
                "lower bound)."
            )
        elif n_cores and sizes and max(sizes) > n_cores:
            notes.append(
                f"Phases measured with more ranks than the machine's {n_cores} cores were divided by "
                "ranks / cores before fitting (oversubscribed = per-core): as if every rank had a core, which "
                "understates the growth of phases that wait on each other rather than compute."
            )
    out = []
    for p in points(run):
        fits: dict[str, Growth] = {}
        borrowed = set()
        for ph in p.phases:
            # The same strategy's phase under another fault kind where this one was not
            # swept: how a phase grows is the stack's, detection aside (that depends on
            # the fault, so it is never borrowed).
            same = data.get((p.strategy, p.fault, ph))
            other = [k for k in data if k[0] == p.strategy and k[2] == ph and ph != "detect"]
            key = (p.strategy, p.fault, ph) if same else (other[0] if other else None)
            if key is None:
                continue
            w, y = data[key]
            fits[ph] = Scaling(choose(w, y), np.asarray(w, dtype=float), np.asarray(y, dtype=float))
            if not same:
                borrowed.add(key[1])
        if borrowed and not p.reason:
            notes.append(f"{p.label}: phase growth taken from the scaling run's {', '.join(sorted(borrowed))} fault.")
        if scaling is not None and p.phases and not fits and not p.reason:
            notes.append(f"{p.label}: the scaling run has no recovered trial of {p.strategy}: phases constant.")
        added: dict[str, Growth] = {}
        for (strategy, phase), cp in curves.items():
            if strategy != p.strategy or p.reason:
                continue
            if phase in p.phases:
                fits[phase] = cp.scaling  # the coordinator measured at scale, not a 2-8-rank fit
            elif cp.fallback in p.phases:
                added[cp.fallback] = cp.scaling  # its time is inside another phase here: added to it
            else:
                continue
            used[strategy, phase] = cp
        out.append(project(p, cluster, fits, added=added, inputs=inputs, replicates=replicates, seed=seed))
    if control is not None:
        notes += ctl.notes(control, list(used.values()), cluster)
        if cluster.control_plane == "model" and any(isinstance(u.scaling, ctl.ModelCurve) for u in used.values()):
            measured = build(
                run,
                replace(cluster, control_plane="measured"),
                scaling,
                inputs=inputs,
                control=control,
                replicates=0,
                seed=seed,
            )
            _bound(out, measured.projections)
    inputs = inputs or Inputs()
    return Result(
        run=run,
        cluster=cluster,
        projections=out,
        scaling=scaling,
        inputs=inputs,
        notes=notes,
        control=control,
        control_used=list(used.values()),
    )


def _bound(model: list[Projection], measured: list[Projection]) -> None:
    """Each cell's band reaches down to E with the control plane as measured on 2 cores."""
    by_label = {p.point.label: p for p in measured}
    for p in model:
        other = by_label.get(p.point.label)
        if other is None:
            continue
        at = {c.gpus: c.effective for c in other.cells}
        for c in p.cells:
            if c.gpus in at and abs(at[c.gpus] - c.effective) > 1e-12:
                c.bound = at[c.gpus]
                c.low, c.high = min(c.low, c.bound), max(c.high, c.bound)
