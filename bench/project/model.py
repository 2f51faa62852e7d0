"""Effective training time at cluster scale: the arithmetic, with its band.

For a job of N GPUs, failures arrive at rate lambda = hosts(N) x rate per host. Each
costs L(N) seconds of wall time:

    L = sum of the measured phases (detection, the strategy's own phases), each shifted
        by its fitted growth from the measured world size to N
      + replayed work: tau / 2 for a stack that checkpoints (its measured catch-up is
        replaced: it replayed from a checkpoint taken every few steps here), else the
        measured catch-up phase (steps recomputed after recovery)
      + degraded running: (shrink / N) x seconds until the world is full again, for a
        stack that goes on with a smaller world (measured, else assumed)
      + the GPU phases a cluster adds (communicator initialisation, a checkpoint load
        from storage, a replacement host), assumed from published figures for the stacks
        that pay them, beyond the run's own phase doing the same work (:mod:`bench.project.gpu`)

The fraction of wall time spent training is

    E = c / (1 + lambda L),   c = tau / (tau + delta) for a checkpointing stack, else 1

(delta the checkpoint write, tau the compute between writes, Young or Daly optimal by
default). Each part's share of wall time is lambda L_i / (1 + lambda L) and the writes'
is (1 - c) / (1 + lambda L), so the shares and E add up to 1.

Where :mod:`bench.project.inputs` has measurements: delta is the stack's fitted write at
the cluster's state per GPU (else the assumed ``checkpoint_write_s``), the restore phase
is the fitted restore at that size (else as measured), and E is divided by the stack's
fault-free step-time tax t (else 1): the time the failures leave is trained at 1/t of
plain DDP's speed. The tax's share of wall time is E (t - 1), so the shares, the tax
and E still add up to 1. t is held at 1 or more (:func:`taxes`): a measured ratio below
1 is noise or load, not a gain, and would put E above 100 %.

Every part is at least 0 (phases, shifts and fits are floored at 0; tau and delta are
not negative), the rate is not negative and t >= 1, so E and every share lie in
[0, 1] and add up to 1 (tests/unit/test_project_edges.py tries the edges).

The band: B bootstrap replicates, each resampling the point's recovered trials (their
mean loss is the expected loss per fault) and, per phase with a scaling fit, the
scaling run's trials within each world size (refitting the chosen model); the band is
the 5th to 95th percentile of E. The estimate is E from all the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from bench.project.assumptions import TargetCluster
from bench.project.fit import Choice, ModelName
from bench.project.gpu import GPU_PARTS, Cost
from bench.project.gpu import lost as gpu_lost
from bench.project.inputs import Band, Inputs
from bench.project.source import CATCHUP, PointFigures
from bench.scale import growth
from bench.scenario.figures import phase_name

#: Parts of the lost time, in the order tables list them (the GPU phases assumed from
#: published figures after the measured recovery: :mod:`bench.project.gpu`).
PARTS = ("detect", "recover", *GPU_PARTS, "replay", "degraded", "checkpoint", "tax")
BAND = (5.0, 95.0)
UNMEASURED = "constant (not measured at other sizes)"
#: The phase a state fit replaces: the recovery's state transfer.
RESTORE = "restore"


class Growth(Protocol):
    """How a phase grows with the job: a fit (:class:`Scaling`) or a model's curve."""

    @property
    def count(self) -> Callable[[float], float] | None:
        """Participants of a job of so many GPUs (None: read at the GPUs themselves)."""

    def x(self, gpus: float) -> float: ...

    def coefs(self, rng: np.random.Generator | None, replicates: int) -> tuple[np.ndarray, np.ndarray]: ...

    def shift(self, coefs: tuple[np.ndarray, np.ndarray], w0: float, n: float) -> np.ndarray: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class Scaling:
    """A phase's chosen growth model and the data it was fitted on (for resampling).

    A phase-scaling fit is against the world size; a control-plane curve (``ftbench
    scale``) is against its coordinator's participants, which ``count`` gives for a job of
    so many GPUs (hosts for torchrun, replica groups for torchft, ranks for the others),
    fitted with relative errors (``relative``), as :mod:`bench.scale.curves` fits it."""

    choice: Choice
    w: np.ndarray
    y: np.ndarray
    count: Callable[[float], float] | None = None
    relative: bool = False
    label: str = ""
    """How the model is named beside the projection ("" for a phase-scaling fit)."""

    def x(self, gpus: float) -> float:
        """Where the model is read for a job of ``gpus`` GPUs."""
        return float(self.count(gpus)) if self.count is not None else float(gpus)

    def coefs(self, rng: np.random.Generator | None, replicates: int) -> tuple[np.ndarray, np.ndarray]:
        """Intercepts and slopes of the chosen model: fitted on all the data (``rng`` None,
        one row) or refitted on ``replicates`` resamples of the points within each size.
        Closed-form (weighted) simple regression, vectorised over replicates."""
        fit = self.choice.fit
        if fit.model == "constant":
            rows = 1 if rng is None else replicates
            return np.full(rows, fit.coef[0]), np.zeros(rows)
        if rng is None:
            return np.array([fit.coef[0]]), np.array([fit.coef[1]])
        groups = [np.flatnonzero(self.w == s) for s in np.unique(self.w)]
        idx = np.concatenate([rng.choice(g, size=(replicates, len(g))) for g in groups], axis=1)
        x, y = transform(fit.model, self.w[idx]), self.y[idx]
        v = 1.0 / np.maximum(np.abs(y), growth.WEIGHT_FLOOR) ** 2 if self.relative else np.ones_like(y)
        mx = (v * x).sum(axis=1, keepdims=True) / v.sum(axis=1, keepdims=True)
        my = (v * y).sum(axis=1, keepdims=True) / v.sum(axis=1, keepdims=True)
        # A resample whose slope falls is held flat, as the choice is (bench.scale.growth).
        slope = np.maximum(0.0, (v * (x - mx) * (y - my)).sum(axis=1) / (v * (x - mx) ** 2).sum(axis=1))
        return (my[:, 0] - slope * mx[:, 0]), slope

    def shift(self, coefs: tuple[np.ndarray, np.ndarray], w0: float, n: float) -> np.ndarray:
        """f(n) - f(w0) per row of ``coefs``: seconds the phase gains from the measured
        world size to n GPUs (each prediction floored at 0: a phase takes no negative time)."""
        a, b = coefs
        model = self.choice.fit.model
        if model == "constant":
            return np.zeros_like(a)

        def at(gpus: float) -> np.ndarray:
            v: np.ndarray = np.maximum(0.0, a + b * transform(model, np.array(self.x(gpus))))
            return v

        out: np.ndarray = at(n) - at(w0)
        return out

    def describe(self) -> str:
        fit = f"{self.choice.fit.describe('N' if self.count else 'w')} ({self.choice.reason})"
        return f"{self.label}: {fit}" if self.label else fit


def transform(model: ModelName, w: np.ndarray) -> np.ndarray:
    return growth.transform(model, w)


@dataclass
class Cell:
    """One point at one cluster size."""

    gpus: int
    effective: float
    low: float
    high: float
    lost_s: float
    """L: expected seconds lost per failure."""
    rate_per_day: float
    tau_s: float | None
    tau_how: str
    shares: dict[str, float] = field(default_factory=dict)
    """Share of wall time of each part (PARTS)."""
    gpu: dict[str, Cost] = field(default_factory=dict)
    """The GPU phases the stack pays at this size (empty with ``gpu_phases = false``)."""
    bound: float | None = None
    """E with the control-plane phases as the scale run measured them (its participants
    on 2 cores: an upper bound on their time), where the model of the protocols gave the
    estimate; the band reaches down to it."""


@dataclass
class Projection:
    point: PointFigures
    cells: list[Cell] = field(default_factory=list)
    models: dict[str, str] = field(default_factory=dict)
    """Phase -> the growth model used and why."""
    notes: list[str] = field(default_factory=list)


def lost_parts(
    point: PointFigures,
    mean: np.ndarray,
    degraded: np.ndarray,
    shifts: dict[str, np.ndarray],
    n: int,
    c: TargetCluster,
    tau: float | np.ndarray | None,
) -> dict[str, np.ndarray]:
    """Expected seconds lost per failure, by part: ``mean`` is (rows x phases) of mean
    phase seconds, ``degraded`` the mean degraded seconds per row (NaN: assumed)."""
    zero = np.zeros(len(mean))
    detect, recover, replay = zero.copy(), zero.copy(), zero.copy()
    for i, ph in enumerate(point.phases):
        v = np.maximum(0.0, mean[:, i] + shifts.get(ph, zero))
        if ph == phase_name(CATCHUP):
            replay += 0.0 if tau is not None else v
        elif ph == "detect":
            detect += v
        else:
            recover += v
    if tau is not None:
        replay += tau / 2.0
    deg = min(1.0, c.gpus_per_host / n) * degraded if point.shrinks else zero
    return {"detect": detect, "recover": recover, "replay": replay, "degraded": deg}


def effective(
    parts: dict[str, np.ndarray],
    rate: float,
    tau: float | np.ndarray | None,
    delta: float | np.ndarray,
    tax: float | np.ndarray = 1.0,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    lost = sum(parts.values(), np.zeros(1))
    denom = 1.0 + rate * lost
    ckpt = np.asarray(1.0) if tau is None else np.where(tau + delta > 0, tau / np.maximum(tau + delta, 1e-300), 1.0)
    shares = {k: rate * v / denom for k, v in parts.items()}
    shares["checkpoint"] = (1.0 - ckpt) / denom
    untaxed = ckpt / denom
    shares["tax"] = untaxed * (1.0 - 1.0 / np.asarray(tax))
    return untaxed / tax, shares


def taxes(tax: Band | None, rng: np.random.Generator, replicates: int) -> tuple[float, np.ndarray, str]:
    """The fault-free tax a projection divides by: the measured step-time ratio and its
    draws, each held at 1 or more, and why where the measurement said less.

    A ratio below 1 would have a stack train more than all of the wall time (E above
    100 %) and count noise as a gain: on two shared cores a resilience stack measured
    0.881 [0.745, 1.060] of plain DDP's step time. An interval that holds 1 says no
    difference was resolved; one entirely below 1 is a speed-up the stack's own work
    cannot give, which is the machine's load. Either way the estimate is 1, and the band
    keeps the measured upper end (its draws below 1 are held at 1)."""
    if tax is None:
        return 1.0, np.ones(replicates), ""
    draws = np.maximum(1.0, tax.draws(rng, replicates))
    if tax.value >= 1.0:
        return tax.value, draws, ""
    measured = f"fault-free tax measured {tax.value:.3f} [{tax.low:.3f}–{tax.high:.3f}] of plain DDP's step time"
    if tax.high >= 1.0:
        why = f"{measured}: the interval holds 1, so no gain is counted (tax taken as 1; the band keeps its upper end)"
    else:
        why = f"{measured}: below 1, which would train more than all the wall time; taken as 1 (the machine's load)"
    return 1.0, draws, why


def project(
    point: PointFigures,
    cluster: TargetCluster,
    scaling: Mapping[str, Growth],
    *,
    added: Mapping[str, Growth] | None = None,
    inputs: Inputs | None = None,
    replicates: int = 1000,
    seed: int = 0,
) -> Projection:
    """E(N) with its band for every cluster size of ``cluster``; empty cells (and the
    reason) for a point no trial of which recovered. ``added``: growth added to a phase on
    top of its own (control-plane work the run measured inside that phase)."""
    added = added or {}
    proj = Projection(point=point)
    if point.reason:
        return proj
    inputs = inputs or Inputs()
    tax, save, restore = (getattr(inputs, k).get(point.strategy) for k in ("tax", "save", "restore"))
    for ph in point.phases:
        s = scaling.get(ph)
        proj.models[ph] = s.describe() if s else UNMEASURED
        if ph in added:
            proj.models[ph] += f"; plus {added[ph].describe()}"
    never = int(np.sum(np.isnan(point.degraded_s)))
    if point.shrinks and never:
        proj.notes.append(
            f"full_strength_s = {cluster.full_strength_s:g} s assumed where the run never got back to full "
            f"strength ({never} of {len(point.degraded_s)} trials)"
        )
    if not point.checkpoints:
        proj.notes.append("no checkpoint cost (wrote none in the run)")
    rng = np.random.default_rng(seed)
    t = len(point.values)
    degraded = np.where(np.isnan(point.degraded_s), cluster.full_strength_s, point.degraded_s)
    idx = rng.integers(0, t, size=(replicates, t))
    b_mean, b_deg = point.values[idx].mean(axis=1), degraded[idx].mean(axis=1)
    b_coefs = {ph: s.coefs(rng, replicates) for ph, s in scaling.items()}
    coefs = {ph: s.coefs(None, 1) for ph, s in scaling.items()}
    b_added = {ph: s.coefs(rng, replicates) for ph, s in added.items()}
    c_added = {ph: s.coefs(None, 1) for ph, s in added.items()}
    mean, deg = point.values.mean(axis=0, keepdims=True), np.array([degraded.mean()])
    t_value, b_tax, why = taxes(tax, rng, replicates)
    if why:
        proj.notes.append(why)
    restore_at = point.phases.index(RESTORE) if RESTORE in point.phases else None
    for n in cluster.gpus:
        rate = cluster.rate(n)
        nbytes = cluster.state_bytes(n)
        delta, b_delta = cluster.checkpoint_write_s, np.full(replicates, cluster.checkpoint_write_s)
        if save is not None and nbytes is not None and point.checkpoints:
            delta, b_delta = save.at(nbytes), save.draws(nbytes, rng, replicates)
        tau, how = cluster.interval(n, delta) if point.checkpoints else (None, "no checkpoints")
        b_shifts = {ph: s.shift(b_coefs[ph], point.world, n) for ph, s in scaling.items()}
        shifts = {ph: s.shift(coefs[ph], point.world, n) for ph, s in scaling.items()}
        # What a GPU phase is credited against: each phase's own growth, not control-plane
        # time another phase's curve adds to it (reinit's resume step lands in reconfigure).
        b_own, own = dict(b_shifts), dict(shifts)
        for ph, s in added.items():
            b_shifts[ph] = b_shifts.get(ph, 0.0) + s.shift(b_added[ph], point.world, n)
            shifts[ph] = shifts.get(ph, 0.0) + s.shift(c_added[ph], point.world, n)
        if restore is not None and nbytes is not None and restore_at is not None:
            # The measured restore is replaced by the fit at the cluster's state size; a
            # control-plane curve of it (the resume step agreed over the store) adds its
            # growth with the participants on top: the state fit is per byte, not per rank.
            ctl = scaling.get(RESTORE)
            on_top = ctl is not None and ctl.count is not None
            b_extra = b_shifts[RESTORE] if on_top else 0.0
            extra = shifts[RESTORE] if on_top else 0.0
            b_shifts[RESTORE] = restore.draws(nbytes, rng, replicates) - b_mean[:, restore_at] + b_extra
            shifts[RESTORE] = np.array([restore.at(nbytes) - mean[0, restore_at]]) + extra
            b_own[RESTORE], own[RESTORE] = b_shifts[RESTORE], shifts[RESTORE]
        b_tau = np.array([cluster.interval(n, float(d))[0] for d in b_delta]) if tau is not None else None
        b_parts = lost_parts(point, b_mean, b_deg, b_shifts, n, cluster, b_tau)
        b_parts.update(gpu_lost(point, cluster, n, at_size(point, b_mean, b_own))[0])
        boot = effective(b_parts, rate, b_tau, b_delta, b_tax)[0]
        parts = lost_parts(point, mean, deg, shifts, n, cluster, tau)
        gpu_parts, gpu_costs = gpu_lost(point, cluster, n, at_size(point, mean, own))
        parts.update(gpu_parts)
        eff, shares = effective(parts, rate, tau, delta, t_value)
        e = float(eff[0])
        low, high = (float(x) for x in np.percentile(boot, BAND)) if replicates else (e, e)
        proj.cells.append(
            Cell(
                gpus=n,
                effective=e,
                low=min(low, e),
                high=max(high, e),
                lost_s=float(sum(v[0] for v in parts.values())),
                rate_per_day=rate * 86_400.0,
                tau_s=tau,
                tau_how=how,
                shares={k: float(v[0]) for k, v in shares.items()},
                gpu=gpu_costs,
            )
        )
    return proj


def at_size(point: PointFigures, mean: np.ndarray, shifts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each phase's seconds at the cluster size, per row (as :func:`lost_parts` counts them)."""
    return {ph: np.maximum(0.0, mean[:, i] + shifts.get(ph, 0.0)) for i, ph in enumerate(point.phases)}


def fmt_pct(x: float) -> str:
    return "—" if math.isnan(x) else f"{100.0 * x:.2f} %"
