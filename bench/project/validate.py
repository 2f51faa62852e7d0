"""The projection checked against a measured run: ``ftbench project RUN --validate``
(shown by :mod:`bench.project.validate_page`).

For each point of a chaos run (faults every so many seconds over a long trial) this
sets the measured effective training time (:mod:`bench.results.effective`) beside what
the model of :mod:`bench.project.model` predicts for the same conditions: the run's own
failure rate (injections per second of wall time), world size, checkpoint write and
interval (as the trial ran them), and per-fault losses (each recovered injection's
phases, and its degraded running). E = c / (1 + lambda L) is the model's, untouched.

The interval is a joint bootstrap over the trial's cycles (injection to injection,
pooled over trials): each replicate resamples cycles, recomputes the measured fraction
from their work and wall time and the prediction from their rate and losses, so the
error's interval carries both sides' spread and their covariance.

Where the two disagree, the parts say where: the share of wall time the model gives
each part (detection, recovery, replay, degraded running, checkpoints) beside the
share the trial spent on it, and the measurements of what the model leaves out:
faults that arrived during a recovery (overlap), recoveries that failed, a checkpoint
interval off Daly's optimum, steps slower after the first fault than before it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from bench.procs.events import read_events
from bench.project.assumptions import TargetCluster
from bench.project.gpu import GPU_PARTS
from bench.project.model import BAND, PARTS, effective, lost_parts
from bench.project.source import CATCHUP, PointFigures, points
from bench.results.effective import Effective, measure
from bench.results.reader import Run

#: Parts of lost time a chaos trial measures directly (the tax is the stack's own step;
#: the GPU phases are a cluster's, assumed, and no part of a run on this machine).
MEASURED_PARTS = tuple(p for p in PARTS if p not in ("tax", *GPU_PARTS))
NEVER = ("not_injected",)
#: Outcomes of a fault whose window (up to the next injection) ended before it
#: recovered: the next one came during its recovery.
UNFINISHED = ("failed", "hung", "unrecorded")
#: The measured part the model has no term for: steps slower (or faster) than the
#: fault-free median, for the share of the world that ran them.
SLOW = "slower steps"


@dataclass
class Injection:
    """One injected fault of a trial, as the model needs it."""

    t_ns: int
    outcome: str
    phases: np.ndarray
    """Seconds per phase of the point (0 where the row lacks one)."""
    downtime_s: float
    degraded_s: float
    """Seconds run on a smaller world after recovery (until full again, or the next fault)."""
    overlapped: bool
    """It came before the previous injection's recovery was over (or that one never recovered)."""


@dataclass
class Check:
    """Measured against predicted for one point."""

    label: str
    strategy: str
    trials: int = 0
    wall_s: float = math.nan
    injected: int = 0
    skipped: int = 0
    recovered: int = 0
    overlapped: int = 0
    trained_within: float = 0.0
    """Share of wall time of the useful work that ended inside recoveries (inject to the
    end of its downtime): survivors that train on while the stack recovers, and the
    replayed steps that end a recovery."""
    rate_per_s: float = math.nan
    lost_s: float = math.nan
    tau_s: float | None = None
    tau_opt_s: float | None = None
    delta_s: float = math.nan
    measured: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    predicted: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    error: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    """Measured minus predicted: estimate, low, high (fractions)."""
    notes_first: list[str] = field(default_factory=list)
    """Said before the diagnosis: where a measured figure was held in its range."""
    model_shares: dict[str, float] = field(default_factory=dict)
    measured_shares: dict[str, float] = field(default_factory=dict)
    slowdown: float = math.nan
    """Median step time after the first fault over the fault-free median."""
    notes: list[str] = field(default_factory=list)
    reason: str = ""


def check(run: Run, *, replicates: int = 2000, seed: int = 0, agree: float = 0.05) -> list[Check]:
    """One :class:`Check` per point with fault trials; ``agree``: the gap (a fraction)
    within which the two count as agreeing."""
    figures = {p.label: p for p in points(run)}
    out = []
    for p, df in run.measured_points():
        h = p["point_hash"]
        label = str(df["label"].iloc[0])
        res = Check(label=label, strategy=str(df["strategy"].iloc[0]))
        point = figures.get(label)
        w = p.get("config", {}).get("workload", {})
        ranks_per_host = int(p.get("config", {}).get("launch", {}).get("ranks_per_host", 1))
        if point is None or not w:
            res.reason = "the run does not record this point's workload"
        else:
            _check_point(run, h, df, point, w, ranks_per_host, res, replicates, seed, agree)
        out.append(res)
    return out


def _check_point(
    run: Run,
    h: str,
    df: pd.DataFrame,
    point: PointFigures,
    w: dict[str, object],
    ranks_per_host: int,
    res: Check,
    replicates: int,
    seed: int,
    agree: float,
) -> None:
    cols = run.phase_columns(h)
    world, steps, warmup = int(str(w["world_size"])), int(str(w["steps"])), int(str(w.get("warmup_steps", 5)))
    trials: list[tuple[Effective, list[Injection]]] = []
    for trial, rows in df.groupby("trial", sort=True):
        events = read_events(run.events_dir(h, str(trial)))
        eff = measure(events, steps=steps, warmup_steps=warmup, world=world)
        if eff is None:
            continue
        res.skipped += sum(1 for e in events if e["event"] == "inject_skipped")
        trials.append((eff, _injections(events, rows, cols, eff)))
    if not trials:
        res.reason = "no trial has an event log with full-world steps past warmup to measure from"
        return
    effs = [e for e, _ in trials]
    injections = [i for _, injs in trials for i in injs]
    res.trials, res.wall_s = len(trials), sum(e.wall_s for e in effs)
    res.injected = len(injections)
    res.recovered = sum(1 for i in injections if i.outcome == "recovered")
    res.overlapped = sum(1 for i in injections if i.overlapped)
    res.trained_within = sum(_within(e, injs) for e, injs in trials) / res.wall_s
    res.slowdown = float(np.median([e.slowdown for e in effs if not math.isnan(e.slowdown)] or [math.nan]))
    saves = sum(e.saves for e in effs)
    res.delta_s = sum(e.checkpoint_s for e in effs) / saves if saves else 0.0
    gaps = [g for e in effs for g in e.save_gaps_s]
    res.tau_s = float(np.mean(gaps)) if saves and gaps else None
    if res.recovered == 0:
        res.reason = "no injected fault recovered: the model has no loss per failure to work with"
        return
    # Cycles pooled over trials: wall, work, and the injection that opened each.
    cycles = [(c, injs[c.fault] if c.fault is not None else None) for e, injs in trials for c in e.cycles]
    wall = np.array([c.wall_s for c, _ in cycles])
    useful = np.array([c.useful_s for c, _ in cycles])
    is_fault = np.array([i is not None for _, i in cycles], dtype=float)
    rec = np.array([i is not None and i.outcome == "recovered" for _, i in cycles], dtype=float)
    phases = np.array([i.phases if i is not None else np.zeros(len(cols)) for _, i in cycles]).reshape(len(cycles), -1)
    degraded = np.array([i.degraded_s if i is not None else 0.0 for _, i in cycles])
    fig = replace(point, world=world, phases=point.phases, degraded_s=degraded[rec > 0])
    cluster = TargetCluster(gpus=(world,), gpus_per_host=ranks_per_host, checkpoint_write_s=res.delta_s)

    def predict(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Measured and predicted E, and the model's shares, for rows of resampled cycles."""
        r = rec[idx]
        n_rec = r.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = (phases[idx] * r[..., None]).sum(axis=1) / n_rec[:, None]
            deg = (degraded[idx] * r).sum(axis=1) / n_rec
            rate = is_fault[idx].sum(axis=1) / wall[idx].sum(axis=1)
            meas = useful[idx].sum(axis=1) / wall[idx].sum(axis=1)
        parts = lost_parts(fig, mean, deg, {}, world, cluster, res.tau_s)
        pred, shares = effective(parts, rate, res.tau_s, res.delta_s)
        return meas, pred, shares

    meas, pred, shares = predict(np.arange(len(cycles))[None, :])
    rng = np.random.default_rng(seed)
    b_meas, b_pred, _ = predict(rng.integers(0, len(cycles), size=(replicates, len(cycles))))
    ok = ~(np.isnan(b_meas) | np.isnan(b_pred))
    res.measured = _share(_band(float(meas[0]), b_meas[ok]))
    if meas[0] > 1.0:
        res.notes_first.append(
            f"measured {100 * float(meas[0]):.1f} % before it was held at 100 %: the steps were valued at their "
            "cycle's mean full-world step, and steps shorter than it (load drifting within the cycle) made the "
            "useful work add up to more than the wall time"
        )
    res.predicted = _band(float(pred[0]), b_pred[ok])
    res.error = _band(float(meas[0] - pred[0]), (b_meas - b_pred)[ok])
    res.rate_per_s = res.injected / res.wall_s
    mean = (phases * rec[:, None]).sum(axis=0) / rec.sum()
    res.lost_s = float(
        sum(
            v[0]
            for v in lost_parts(
                fig, mean[None, :], np.array([degraded[rec > 0].mean()]), {}, world, cluster, res.tau_s
            ).values()
        )
    )
    res.model_shares = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in shares.items() if k in MEASURED_PARTS}
    res.measured_shares = _measured_shares(effs, injections, cols, res.wall_s)
    if res.tau_s is not None:
        res.tau_opt_s = TargetCluster(
            gpus=(world,),
            gpus_per_host=ranks_per_host,
            failures_per_host_day=res.rate_per_s * 86_400.0 * ranks_per_host / world,
        ).interval(world, res.delta_s)[0]
    res.notes = res.notes_first + _diagnose(res, agree)


def _injections(
    events: list[dict[str, object]], rows: pd.DataFrame, cols: list[str], eff: Effective
) -> list[Injection]:
    """The trial's injections in time order, each with its row of trials.csv: rows of one
    fault entry are in the order it fired, so the k-th row of entry i is its k-th inject."""
    injects = sorted(
        (e for e in events if e["event"] == "inject" and int(str(e["t"])) in set(eff.injects_ns)),
        key=lambda e: int(str(e["t"])),
    )
    by_entry: dict[int, list[pd.Series]] = {}
    for _, r in rows[~rows["outcome"].isin(NEVER)].iterrows():
        by_entry.setdefault(int(r["fault_index"]), []).append(r)
    taken: dict[int, int] = {}
    ends = [*eff.injects_ns[1:], eff.cycles[-1].end_ns]
    out: list[Injection] = []
    prev_end = 0
    for e, nxt in zip(injects, ends, strict=True):
        i = int(str(e.get("fault", 0)))
        k = taken.get(i, 0)
        taken[i] = k + 1
        row = by_entry.get(i, [])[k] if k < len(by_entry.get(i, [])) else None
        t = int(str(e["t"]))
        outcome = str(row["outcome"]) if row is not None else "unrecorded"
        down = _num(row.get("downtime_s")) if row is not None else math.nan
        ttfs = _num(row.get("ttfs_s")) if row is not None else math.nan
        gap = (nxt - t) / 1e9
        degraded = max(0.0, (gap if math.isnan(ttfs) else min(ttfs, gap)) - (0.0 if math.isnan(down) else down))
        vals = np.nan_to_num(np.array([_num(row.get(c)) if row is not None else 0.0 for c in cols]), nan=0.0)
        out.append(
            Injection(
                t_ns=t,
                outcome=outcome,
                phases=vals,
                downtime_s=down,
                degraded_s=degraded if outcome == "recovered" else 0.0,
                overlapped=bool(out) and (out[-1].outcome in UNFINISHED or t < prev_end),
            )
        )
        prev_end = t + int(down * 1e9) if outcome == "recovered" and not math.isnan(down) else t
    return out


def _within(eff: Effective, injections: list[Injection]) -> float:
    """Seconds of useful work whose step ended inside a recovered fault's downtime."""
    ends = np.array([t for t, _ in eff.work], dtype=np.int64)
    worth = np.concatenate([[0.0], np.cumsum([w for _, w in eff.work])])
    total = 0.0
    for i in injections:
        if i.outcome != "recovered" or math.isnan(i.downtime_s):
            continue
        lo, hi = np.searchsorted(ends, [i.t_ns, i.t_ns + int(i.downtime_s * 1e9)], side="right")
        total += float(worth[hi] - worth[lo])
    return total


def _measured_shares(
    effs: list[Effective], injections: list[Injection], cols: list[str], wall: float
) -> dict[str, float]:
    """Share of the wall time the trials spent on each part, as measured."""
    detect = [c == "phase_detect_s" for c in cols]
    replay = [c == CATCHUP for c in cols]
    rec = [i for i in injections if i.outcome == "recovered"]
    parts = {
        "detect": sum(float(i.phases[detect].sum()) for i in rec),
        "recover": sum(float(i.phases[~np.array(detect) & ~np.array(replay)].sum()) for i in rec),
        "replay": sum(float(i.phases[replay].sum()) for i in rec),
        "degraded": sum(e.degraded_s for e in effs),
        "checkpoint": sum(e.checkpoint_s for e in effs),
        SLOW: sum(e.slow_s for e in effs),
    }
    # A share of wall time lies in [0, 1]: full-world steps faster than their cycle's mean
    # make the "slower than the mean" part negative, which is none of the wall time.
    return {k: v / wall if math.isnan(v / wall) else min(1.0, max(0.0, v / wall)) for k, v in parts.items()}


def _diagnose(res: Check, agree: float) -> list[str]:
    """Which term of the model is off, from the measurements (empty when they agree
    and nothing the model leaves out was met)."""
    notes = []
    est, low, high = res.error
    if abs(est) <= agree:
        notes.append(f"agree within {100 * agree:.0f} points (measured - predicted = {100 * est:+.1f} points)")
    else:
        notes.append(f"differ by {100 * est:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}]")
    for part in (*MEASURED_PARTS, SLOW):
        m, p = res.measured_shares.get(part, 0.0), res.model_shares.get(part, 0.0)
        if abs(m - p) >= 0.02:
            notes.append(f"{part}: the model gives it {100 * p:.1f} % of wall time, the trial spent {100 * m:.1f} %")
    first_order = res.model_shares and res.rate_per_s * res.lost_s
    if first_order and abs(est) > agree:
        c = 1.0 - res.model_shares.get("checkpoint", 0.0) * (1.0 + first_order)
        wall_form = c * (1.0 - first_order)
        notes.append(
            f"failures here arrive per second of wall time (the chaos schedule's clock), for which "
            f"E = c (1 - lambda L) = {100 * wall_form:.1f} % (lambda L = {first_order:.3f}; measured - this = "
            f"{100 * (res.measured[0] - wall_form):+.1f} points); the model's c / (1 + lambda L) counts them per "
            "second of useful time, the same to first order, apart by (lambda L)^2"
        )
    failed = res.injected - res.recovered
    if failed:
        notes.append(
            f"{failed} of {res.injected} injected faults did not recover: their cost is in the measured time, "
            "while the model's loss per failure averages the recovered ones only"
        )
    if res.trained_within >= 0.01:
        notes.append(
            f"{100 * res.trained_within:.1f} % of wall time's useful work ended inside recoveries (survivors "
            "training on while the stack recovered, or the replayed steps that end one): the model counts the "
            "whole downtime as lost"
        )
    if res.overlapped:
        notes.append(
            f"{res.overlapped} of {res.injected} faults arrived while the previous recovery was under way "
            f"(and {res.skipped} firings found no live process): the model counts failures as separate"
        )
    if res.tau_s is not None and res.tau_opt_s is not None and res.tau_s > 0:
        notes.append(
            f"checkpoint interval {res.tau_s:.3g} s against Daly's optimum {res.tau_opt_s:.3g} s for this rate "
            f"and a {res.delta_s:.3g} s write"
        )
    if not math.isnan(res.slowdown) and abs(res.slowdown - 1.0) >= 0.05:
        notes.append(
            f"steps of the full world after the first fault took {res.slowdown:.2f}x the fault-free median: the "
            "model runs every step at the fault-free speed between failures, and measured E "
            f"{'loses' if res.slowdown > 1 else 'gains'} what this changes (on a shared machine, its load)"
        )
    rest = 1.0 - res.measured[0] - sum(res.measured_shares.values())
    if abs(rest) >= 0.02:
        notes.append(
            f"{100 * rest:+.1f} % of wall time is in no measured part (failed or overlapping recoveries, steps "
            "slower or faster than the fault-free median)"
        )
    return notes


def _share(band: tuple[float, float, float]) -> tuple[float, float, float]:
    """A band of a share of wall time, held in [0, 1] (NaN stays NaN)."""
    held = tuple(v if math.isnan(v) else min(1.0, max(0.0, v)) for v in band)
    return (held[0], held[1], held[2])


def _band(estimate: float, draws: np.ndarray) -> tuple[float, float, float]:
    if not len(draws):
        return (estimate, math.nan, math.nan)
    low, high = (float(x) for x in np.percentile(draws, BAND))
    return (estimate, min(low, estimate), max(high, estimate))


def _num(v: object) -> float:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
