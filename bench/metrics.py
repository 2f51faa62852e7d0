"""Figures of a trial, computed from its event log alone.

Definitions (DESIGN.md "Trial lifecycle and the figures"), per fault:

- ``ttd_s``: first ``detect`` by any surviving process (rank, agent, lighthouse) minus
  ``inject``. Detections by the fault's own victims (a stalled rank that wakes up) do
  not count: they are not the system noticing.
- ``ttd_all_s``: the last surviving rank's first ``detect`` minus ``inject``; empty if
  some surviving rank never detected.
- ``ttr_s``: end of the first good step minus the first detect. A good step comes from
  the world formed after the fault (``gen`` at or past the first ``reconfigured``) and
  is past the last step committed before the detection, so replayed steps count as
  recovery time. Its end is the latest ``step_end`` of that step among the world.
- ``downtime_s`` = ``ttd_s + ttr_s``.
- phases: consecutive boundaries inject -> detect -> (strategy's boundary events) ->
  good step end; each phase is the gap between its boundary and the previous one that
  exists, so the phases present always add up to ``downtime_s``.
- ``steps_lost``: committed steps that were computed again after recovery.
- ``goodput``: distinct steps completed x fault-free median step time / training wall
  time (first step start to the end of the job's last rank).
- ``degraded_step_ratio``: median step time after recovery / fault-free median; for a
  fault nobody detected, median time of the steps that ran while it lasted (inject to
  its ``fault_end``) / fault-free median: a straggler's cost.
- ``loss_delta``: final loss minus the fault-free reference's final loss (same point,
  same seed), when a reference was run.
- outcome ``corrupted``: nothing detected the fault, the job finished, and its final
  parameters are wrong: replicas disagree, or they differ from the reference's.

Beyond DESIGN.md's table:

- ``ttfs_s``: time to full strength: end of the first step of a post-fault world that
  is as large as the world before the fault, minus ``inject`` (a replacement joined).
- ``steps_discarded``: iterations a surviving process computed and threw away
  (``discard`` events: TorchFT's uncommitted steps), the most of any process.
- ``restore_s`` / ``restore_bytes``: the longest state transfer of the recovery
  (``restore_start`` -> ``restore_end`` in one process) and its size.

A figure that does not exist for an outcome is NaN, never 0.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.events import Event

NAN = math.nan

FIGURES: tuple[str, ...] = (
    "ttd_s",
    "ttd_all_s",
    "ttr_s",
    "downtime_s",
    "steps_lost",
    "goodput",
    "degraded_step_ratio",
    "loss_delta",
    "ttfs_s",
    "steps_discarded",
    "restore_s",
    "restore_bytes",
)
#: Outcomes of DESIGN.md, plus ``not_injected`` (the trigger was never reached) and
#: ``completed`` (a trial of a scenario without faults that ran to its end).
OUTCOMES: tuple[str, ...] = ("recovered", "failed", "absorbed", "hung", "corrupted", "not_injected", "completed")

#: Boundaries between detect and the good step for strategies that do not declare theirs.
DEFAULT_PHASES: tuple[tuple[str, str], ...] = (("reconfigure", "reconfigured"), ("restore", "restore_end"))


def is_figure(name: str) -> bool:
    return name in FIGURES or (name.startswith("phase_") and name.endswith("_s"))


@dataclass(slots=True)
class WorldStep:
    """One step as the whole world saw it (ranks of the same generation)."""

    gen: int
    step: int
    t_end: int
    ranks: set[int] = field(default_factory=set)
    loss: float = 0.0
    has_loss: bool = False
    world_size: int = 0


@dataclass(slots=True)
class TrialSummary:
    """Fault-independent facts of one trial."""

    steps_done: int
    completed: bool
    hung: bool
    final_loss: float
    ff_step_s: float
    train_start_ns: int | None
    train_end_ns: int | None
    checkpoint_s: float = NAN
    """Seconds spent writing checkpoints in the trial (their cost), NaN without any."""
    checkpoint_bytes: float = NAN
    final_digests: frozenset[str] = frozenset()
    """Parameter digests the ranks reported when they finished (one if replicas agree)."""
    final_l1: float = NAN
    """L1 norm of the final parameters (compared with the reference's)."""


@dataclass(slots=True)
class FaultFigures:
    fault: int
    kind: str
    target: str
    outcome: str
    figures: dict[str, float]
    phases: dict[str, float]
    error: str = ""
    mechanism: str = ""
    """How the fault was carried out (signal, rank-side hook, iptables, tbf, nfqueue...)."""


def world_steps(events: Iterable[Event]) -> dict[tuple[int, int], WorldStep]:
    table: dict[tuple[int, int], WorldStep] = {}
    for e in events:
        if e["event"] != "step_end":
            continue
        key = (int(e.get("gen", 0)), int(e["step"]))
        ws = table.get(key)
        if ws is None:
            ws = table[key] = WorldStep(gen=key[0], step=key[1], t_end=e["t"])
        ws.t_end = max(ws.t_end, e["t"])
        ws.ranks.add(int(e["rank"]))
        ws.world_size = max(ws.world_size, int(e.get("world_size", 0)))
        if e.get("loss_share") is not None:
            ws.loss += float(e["loss_share"])
            ws.has_loss = True
    return table


def summarize(events: Sequence[Event], *, steps: int, warmup_steps: int) -> TrialSummary:
    injects = [e for e in events if e["event"] == "inject"]
    first_inject = injects[0]["t"] if injects else None
    step_events = [e for e in events if e["event"] == "step_end"]
    pre = [
        float(e["step_s"])
        for e in step_events
        if int(e["step"]) > warmup_steps and (first_inject is None or e["t"] < first_inject)
    ]
    table = world_steps(step_events)
    done = {step for (_, step) in table}
    final = max(table.values(), key=lambda w: (w.t_end, w.step), default=None)
    final_loss = final.loss if final is not None and final.has_loss and final.step == steps else NAN
    starts = [e["t"] - int(float(e["step_s"]) * 1e9) for e in step_events if int(e["step"]) == 1]
    rank_ends = [e["t"] for e in events if e.get("src") == "rank"]
    hung = any(e["event"] == "trial_end" and e.get("outcome") == "hung" for e in events)
    saves = [e for e in events if e["event"] == "checkpoint"]
    ends = [e for e in events if e["event"] == "train_end" and e.get("digest")]
    last_gen = max((int(e.get("gen", 0)) for e in ends), default=0)
    ends = [e for e in ends if int(e.get("gen", 0)) == last_gen]
    return TrialSummary(
        final_digests=frozenset(str(e["digest"]) for e in ends),
        final_l1=float(ends[0]["l1"]) if ends and ends[0].get("l1") is not None else NAN,
        checkpoint_s=sum(float(e["save_s"]) for e in saves) if saves else NAN,
        checkpoint_bytes=float(saves[-1]["bytes"]) if saves else NAN,
        steps_done=len(done),
        completed=steps in done and any(e["event"] == "train_end" for e in events),
        hung=hung,
        final_loss=final_loss,
        ff_step_s=statistics.median(pre) if pre else NAN,
        train_start_ns=min(starts) if starts else None,
        train_end_ns=max(rank_ends) if rank_ends else None,
    )


def fault_figures(
    events: Sequence[Event],
    *,
    faults: Sequence[tuple[str, str]],
    steps: int,
    warmup_steps: int,
    phases: Sequence[tuple[str, str]] = DEFAULT_PHASES,
    reference: TrialSummary | None = None,
) -> list[FaultFigures]:
    """One :class:`FaultFigures` per injection, in order.

    ``faults`` lists the scenario's faults as ``(kind, target text)``; a fault that was
    never injected (its trigger was not reached) still gets a row, outcome
    ``not_injected`` (or ``hung``), so that nothing silently disappears. A trial without
    faults gets one row, fault ``none``, outcome ``completed`` if the job finished.
    """
    summary = summarize(events, steps=steps, warmup_steps=warmup_steps)
    ref_step_s = reference.ff_step_s if reference else NAN
    ff_step_s = ref_step_s if not math.isnan(ref_step_s) else summary.ff_step_s
    goodput = _goodput(summary, ff_step_s)
    loss_delta = summary.final_loss - (reference.final_loss if reference else NAN)
    corrupted = _corruption(summary, reference)
    injects = [e for e in events if e["event"] == "inject"]
    results = []
    for i, inj in enumerate(injects):
        t_next = injects[i + 1]["t"] if i + 1 < len(injects) else None
        window = [e for e in events if e["t"] >= inj["t"] and (t_next is None or e["t"] < t_next)]
        results.append(
            _one_fault(inj, events, window, summary, phases, ff_step_s, goodput, loss_delta, corrupted)
        )
    fired = {int(e.get("fault", 0)) for e in injects}
    skipped = {int(e["fault"]): e.get("reason", "") for e in events if e["event"] == "inject_skipped"}
    armed = {int(e["fault"]) for e in events if e["event"] == "arm"}
    for index, (kind, target) in enumerate(faults):
        if index not in fired:
            fig = dict.fromkeys(FIGURES, NAN)
            outcome = "hung" if summary.hung else "not_injected"
            why = ("the fault's trigger was never reached" if index not in skipped and index not in armed
                   else skipped.get(index) or "armed, but the target never reached a collective")
            results.append(FaultFigures(fault=index, kind=kind, target=target, outcome=outcome, figures=fig,
                                        phases={}, error=why))
    if not faults:
        fig = dict.fromkeys(FIGURES, NAN)
        fig["goodput"] = goodput
        fig["loss_delta"] = loss_delta
        outcome = "hung" if summary.hung else ("completed" if summary.completed else "failed")
        results.append(FaultFigures(fault=-1, kind="none", target="", outcome=outcome, figures=fig, phases={}))
    results.sort(key=lambda f: f.fault)
    return results


def _one_fault(
    inj: Event,
    events: Sequence[Event],
    window: Sequence[Event],
    summary: TrialSummary,
    phases: Sequence[tuple[str, str]],
    ff_step_s: float,
    goodput: float,
    loss_delta: float,
    corrupted: str,
) -> FaultFigures:
    t0 = inj["t"]
    victims = {int(r) for r in inj.get("ranks", [])}
    fig = dict.fromkeys(FIGURES, NAN)
    fig["goodput"] = goodput
    phase_fig = {f"phase_{name}_s": NAN for name in ("detect", *(p for p, _ in phases), "catchup")}

    detects = [e for e in window if e["event"] == "detect" and not _by_victim(e, victims)]
    pre_steps = [e for e in events if e["event"] == "step_end" and e["t"] < t0]
    last_gen = max((int(e.get("gen", 0)) for e in pre_steps), default=0)
    survivors = {int(e["rank"]) for e in pre_steps if int(e.get("gen", 0)) == last_gen} - victims
    common = dict(fault=int(inj.get("fault", 0)), kind=str(inj.get("kind", "")),
                  target=str(inj["component"]) if inj.get("component") else ",".join(map(str, sorted(victims))),
                  mechanism=_mechanism(inj))

    if not detects:
        # Nothing noticed: how slow were the steps while the fault lasted (until its
        # fault_end; one-shot faults: until the next fault or the end)?
        ends = [e["t"] for e in window if e["event"] == "fault_end" and e.get("fault") == inj.get("fault")]
        t_end = min(ends) if ends else math.inf
        during = [float(e["step_s"]) for e in window if e["event"] == "step_end"
                  and e["t"] - float(e["step_s"]) * 1e9 <= t_end]
        fig["degraded_step_ratio"] = _ratio(during, ff_step_s)
        fig["loss_delta"] = loss_delta
        # The last fault of a trial is absorbed if the job then finished; an earlier one
        # if training went on until the next fault came.
        last = window[-1]["t"] >= events[-1]["t"]
        went_on = summary.completed if last else any(e["event"] == "step_end" for e in window)
        outcome = "absorbed" if went_on else "failed"
        fig["steps_lost"] = 0.0 if went_on else NAN
        error = "" if went_on else "job ended without completing and nothing detected a fault"
        if last and summary.completed and corrupted:
            outcome, error = "corrupted", corrupted
        return _result(summary, outcome, fig, phase_fig, error, common)

    t_detect = min(e["t"] for e in detects)
    fig["ttd_s"] = phase_fig["phase_detect_s"] = _s(t_detect - t0)
    firsts: dict[int, int] = {}
    for e in detects:
        if e.get("src") == "rank" and int(e["rank"]) in survivors:
            firsts.setdefault(int(e["rank"]), e["t"])
    if survivors and set(firsts) == survivors:
        fig["ttd_all_s"] = _s(max(firsts.values()) - t0)

    committed = max((int(e["step"]) for e in events if e["event"] == "step_end" and e["t"] < t_detect), default=0)
    reconf = [e for e in window if e["event"] == "reconfigured" and e["t"] >= t_detect]
    min_gen = min((int(e["gen"]) for e in reconf), default=last_gen)
    after = [
        e for e in window
        if e["event"] == "step_end" and e["t"] > t_detect and int(e.get("gen", 0)) >= min_gen
    ]
    good = [e for e in after if int(e["step"]) > committed]
    if not good:
        return _result(summary, "failed", fig, phase_fig, "" if reconf else "job stopped at the fault", common)

    first_good = min(good, key=lambda e: e["t"])
    good_gen, good_step = int(first_good.get("gen", 0)), int(first_good["step"])
    t_good = max(e["t"] for e in good if int(e.get("gen", 0)) == good_gen and int(e["step"]) == good_step)
    fig["ttr_s"] = _s(t_good - t_detect)
    fig["downtime_s"] = fig["ttd_s"] + fig["ttr_s"]
    pre_size = max((int(e.get("world_size", 0)) for e in pre_steps if int(e.get("gen", 0)) == last_gen), default=0)
    full = [e for e in after if int(e.get("world_size", 0)) >= pre_size > 0 and int(e.get("gen", 0)) > last_gen]
    if full:
        first_full = min(full, key=lambda e: e["t"])
        key = (int(first_full.get("gen", 0)), int(first_full["step"]))
        fig["ttfs_s"] = _s(max(e["t"] for e in full if (int(e.get("gen", 0)), int(e["step"])) == key) - t0)
    discards: dict[Any, int] = {}
    for e in window:
        if e["event"] == "discard" and not _by_victim(e, victims):
            discards[e.get("pid")] = discards.get(e.get("pid"), 0) + 1
    fig["steps_discarded"] = float(max(discards.values(), default=0))
    starts = {e.get("pid"): e["t"] for e in window if e["event"] == "restore_start"}
    transfers = [(e["t"] - starts[e.get("pid")], e.get("bytes")) for e in window
                 if e["event"] == "restore_end" and e.get("pid") in starts]
    if transfers:
        longest = max(transfers, key=lambda x: x[0])
        fig["restore_s"] = _s(longest[0])
        fig["restore_bytes"] = float(longest[1]) if longest[1] is not None else NAN
    resumed = min(int(e["step"]) for e in after)
    fig["steps_lost"] = float(max(0, committed - resumed + 1))
    recovered_steps = [float(e["step_s"]) for e in after if e["t"] > t_good]
    fig["degraded_step_ratio"] = _ratio(recovered_steps, ff_step_s)
    fig["loss_delta"] = loss_delta

    boundary = t_detect
    for name, spec in phases:
        event_name, _, src = spec.partition("@")  # "event" or "event@src"
        ts = [e["t"] for e in window if e["event"] == event_name and (not src or e.get("src") == src)
              and t_detect <= e["t"] <= t_good]
        if ts:
            phase_fig[f"phase_{name}_s"] = _s(max(ts) - boundary)
            boundary = max(ts)
    phase_fig["phase_catchup_s"] = _s(t_good - boundary)
    return _result(summary, "recovered", fig, phase_fig, "", common)


def _result(summary: TrialSummary, outcome: str, fig: dict[str, float], phases: dict[str, float], error: str,
            common: dict[str, Any]) -> FaultFigures:
    """A trial that reached its deadline is ``hung`` whatever happened before; the
    figures it did produce (a detection, say) are kept."""
    if summary.hung:
        outcome, error = "hung", "trial deadline reached; everything was killed" + (f" ({error})" if error else "")
    return FaultFigures(outcome=outcome, figures=fig, phases=phases, error=error, **common)


#: Relative difference of final parameter L1 norms beyond which a run did not learn
#: what its fault-free reference learnt. A correct run differs by float rounding only
#: (the reduction order changes with the world size): ~1e-7 measured after a shrink,
#: up to 4.5e-5 after ~570 steps of a lone torchft survivor; a flipped exponent bit
#: changes it by orders of magnitude.
CORRUPTION_RTOL = 1e-3


def _corruption(summary: TrialSummary, reference: TrialSummary | None) -> str:
    """Why the final state is wrong ("" if it is not, or cannot be known)."""
    if len(summary.final_digests) > 1:
        return f"replicas diverged: {len(summary.final_digests)} different final parameter digests"
    ref = reference.final_l1 if reference else NAN
    if not (math.isnan(ref) or math.isnan(summary.final_l1)):
        rel = abs(summary.final_l1 - ref) / max(abs(ref), 1e-30)
        if not rel <= CORRUPTION_RTOL:  # NaN and inf parameters count as corrupted
            return f"final parameters differ from the fault-free reference (relative L1 difference {rel:.3g})"
    return ""


def _mechanism(inj: Event) -> str:
    """What served the fault: the injector's own word for link faults, else how."""
    if inj.get("mechanism"):
        return str(inj["mechanism"])
    if inj.get("src") == "rank":
        return "rank-side hook"
    return f"signal {inj['signal']}" if inj.get("signal") else ""


def _by_victim(e: Event, victims: set[int]) -> bool:
    return e.get("src") == "rank" and int(e.get("rank", -1)) in victims


def _s(ns: int) -> float:
    return ns / 1e9


def _ratio(samples: Sequence[float], base: float) -> float:
    if not samples or math.isnan(base) or base <= 0:
        return NAN
    return statistics.median(samples) / base


def _goodput(summary: TrialSummary, ff_step_s: float) -> float:
    if summary.train_start_ns is None or summary.train_end_ns is None or math.isnan(ff_step_s):
        return NAN
    wall = _s(summary.train_end_ns - summary.train_start_ns)
    return summary.steps_done * ff_step_s / wall if wall > 0 else NAN


def as_row(f: FaultFigures) -> dict[str, Any]:
    return {"fault_index": f.fault, "fault": f.kind, "target": f.target, "mechanism": f.mechanism, **f.figures,
            **f.phases, "outcome": f.outcome, "error": f.error}
