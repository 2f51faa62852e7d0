"""Figures of a trial, computed from its event log alone.

What each figure means is :mod:`bench.scenario.figures`; how it is computed, per fault:

- ``ttd_s``: first ``detect`` by any surviving process (rank, supervisor, agent,
  lighthouse) minus ``inject``. Detections by the fault's own victims (a stalled rank
  that wakes up) do not count: they are not the system noticing.
- ``ttd_rank_s``: the first ``detect`` of a surviving rank (the user's training code
  seeing the exception) minus ``inject``: what a bare torch.distributed loop can see.
- ``ttd_rank_s``: the first ``detect`` of a surviving rank (the user's training code
  seeing the exception) minus ``inject``: what a bare torch.distributed loop can see.
- ``ttd_all_s``: the last surviving rank's first ``detect`` minus ``inject``; empty if
  some surviving rank never detected.
- ``inject_phase``: time since the victims' last ``step_end`` before the injection over
  the fault-free median step time: where in the step the fault landed (a kill inside a
  collective is seen at once, one between collectives only at the next).
- ``inject_phase``: time since the victims' last ``step_end`` before the injection over
  the fault-free median step time: where in the step the fault landed (a kill inside a
  collective is seen at once, one between collectives only at the next).
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
- ``ttfs_s``: end of the first step of a post-fault world as large as the world before
  the fault, minus ``inject``.
- ``steps_discarded``: ``discard`` events of a surviving process, the most of any.
- ``restore_s`` / ``restore_bytes``: the longest ``restore_start`` -> ``restore_end``
  of one process, and its size.
- outcome ``corrupted``: nothing detected the fault, the job finished, and its final
  parameters are wrong: replicas disagree, or they differ from the reference's.

A figure that does not exist for an outcome is NaN, never 0.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bench.results.events import Event
from bench.scenario.figures import FAULT_FIGURES, phase_column

NAN = math.nan

#: Relative difference of final parameter L1 norms beyond which a run did not learn
#: what its fault-free reference learnt. A correct run differs by float rounding only
#: (the reduction order changes with the world size): ~1e-7 measured after a shrink,
#: up to 4.5e-5 after ~570 steps of a lone torchft survivor; a flipped exponent bit
#: changes it by orders of magnitude.
CORRUPTION_RTOL = 1e-3


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
class TrialFacts:
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
    interposer: str = ""
    """What ftbench had in the ranks' collective path (``none``: the stack as shipped)."""
    detect_how: str = ""
    """How the first detection happened (a gloo error's kind, timeout, exit, quorum_drop...)."""
    detect_site: str = ""
    """Where the first rank to detect saw it: ``backward``, ``all_reduce`` or ``wait``."""

    def row(self) -> dict[str, object]:
        """The fault's cells of trials.csv."""
        return {
            "fault_index": self.fault,
            "fault": self.kind,
            "target": self.target,
            "mechanism": self.mechanism,
            "interposer": self.interposer,
            **self.figures,
            **self.phases,
            "outcome": self.outcome,
            "error": self.error,
            "detect_how": self.detect_how,
            "detect_site": self.detect_site,
        }


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


def trial_facts(events: Sequence[Event], *, steps: int, warmup_steps: int) -> TrialFacts:
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
    saves = [e for e in events if e["event"] == "checkpoint"]
    ends = [e for e in events if e["event"] == "train_end" and e.get("digest")]
    last_gen = max((int(e.get("gen", 0)) for e in ends), default=0)
    ends = [e for e in ends if int(e.get("gen", 0)) == last_gen]
    return TrialFacts(
        final_digests=frozenset(str(e["digest"]) for e in ends),
        final_l1=float(ends[0]["l1"]) if ends and ends[0].get("l1") is not None else NAN,
        checkpoint_s=sum(float(e["save_s"]) for e in saves) if saves else NAN,
        checkpoint_bytes=float(saves[-1]["bytes"]) if saves else NAN,
        steps_done=len(done),
        completed=steps in done and any(e["event"] == "train_end" for e in events),
        hung=any(e["event"] == "trial_end" and e.get("outcome") == "hung" for e in events),
        final_loss=final_loss,
        ff_step_s=statistics.median(pre) if pre else NAN,
        train_start_ns=min(starts) if starts else None,
        train_end_ns=max(rank_ends) if rank_ends else None,
    )


@dataclass(frozen=True, slots=True)
class Trial:
    """What every fault of one trial is measured against."""

    events: Sequence[Event]
    facts: TrialFacts
    phases: Sequence[tuple[str, str]]
    """The strategy's phases: (name, ``event`` or ``event@src`` that ends it)."""
    ff_step_s: float
    """Fault-free median step time: the reference's, else this trial's before the fault."""
    goodput: float
    loss_delta: float
    corrupted: str
    """Why the final state is wrong, or ""."""


def fault_figures(
    events: Sequence[Event],
    *,
    faults: Sequence[tuple[str, str]],
    steps: int,
    warmup_steps: int,
    phases: Sequence[tuple[str, str]],
    reference: TrialFacts | None = None,
) -> list[FaultFigures]:
    """One :class:`FaultFigures` per injection, in order.

    ``faults`` lists the scenario's faults as ``(kind, target text)``; a fault that was
    never injected (its trigger was not reached) still gets a row, outcome
    ``not_injected`` (or ``hung``), so that nothing silently disappears. A trial without
    faults gets one row, fault ``none``, outcome ``completed`` if the job finished.
    """
    facts = trial_facts(events, steps=steps, warmup_steps=warmup_steps)
    ref_step_s = reference.ff_step_s if reference else NAN
    ff_step_s = ref_step_s if not math.isnan(ref_step_s) else facts.ff_step_s
    trial = Trial(
        events=events,
        facts=facts,
        phases=phases,
        ff_step_s=ff_step_s,
        goodput=_goodput(facts, ff_step_s),
        loss_delta=facts.final_loss - (reference.final_loss if reference else NAN),
        corrupted=_corruption(facts, reference),
    )
    injects = [e for e in events if e["event"] == "inject"]
    results = [
        FaultWindow(trial, inj, injects[i + 1]["t"] if i + 1 < len(injects) else None).figures()
        for i, inj in enumerate(injects)
    ]
    results += _never_injected(trial, faults, {int(e.get("fault", 0)) for e in injects})
    if not faults:
        fig = dict.fromkeys(FAULT_FIGURES, NAN) | {"goodput": trial.goodput, "loss_delta": trial.loss_delta}
        outcome = "hung" if facts.hung else ("completed" if facts.completed else "failed")
        results.append(FaultFigures(fault=-1, kind="none", target="", outcome=outcome, figures=fig, phases={}))
    results.sort(key=lambda f: f.fault)
    return results


def _never_injected(trial: Trial, faults: Sequence[tuple[str, str]], fired: set[int]) -> list[FaultFigures]:
    """A row for every fault that never fired, saying why."""
    events = trial.events
    skipped = {int(e["fault"]): e.get("reason", "") for e in events if e["event"] == "inject_skipped"}
    armed = {int(e["fault"]) for e in events if e["event"] == "arm"}
    rows = []
    for index, (kind, target) in enumerate(faults):
        if index in fired:
            continue
        why = (
            "the fault's trigger was never reached"
            if index not in skipped and index not in armed
            else skipped.get(index) or "armed, but the target never reached a collective"
        )
        rows.append(
            FaultFigures(
                fault=index,
                kind=kind,
                target=target,
                outcome="hung" if trial.facts.hung else "not_injected",
                figures=dict.fromkeys(FAULT_FIGURES, NAN),
                phases={},
                error=why,
            )
        )
    return rows


class FaultWindow:
    """One injection and the events from it until the next injection."""

    def __init__(self, trial: Trial, inj: Event, t_next: int | None) -> None:
        self.trial = trial
        self.inj = inj
        self.t0: int = inj["t"]
        self.window = [e for e in trial.events if e["t"] >= self.t0 and (t_next is None or e["t"] < t_next)]
        self.victims = {int(r) for r in inj.get("ranks", [])}
        self.pre_steps = [e for e in trial.events if e["event"] == "step_end" and e["t"] < self.t0]
        self.last_gen = max((int(e.get("gen", 0)) for e in self.pre_steps), default=0)
        self.fig = dict.fromkeys(FAULT_FIGURES, NAN) | {"goodput": trial.goodput}
        self.phase_fig = {phase_column(name): NAN for name in ("detect", *(p for p, _ in trial.phases), "catchup")}

    def figures(self) -> FaultFigures:
        detects = [e for e in self.window if e["event"] == "detect" and not self._by_victim(e)]
        if not detects:
            outcome, error = self._undetected()
        else:
            outcome, error = self._detected(min(e["t"] for e in detects), detects)
        if self.trial.facts.hung:
            # A trial that reached its deadline is hung whatever happened before; the
            # figures it did produce (a detection, say) are kept.
            outcome, error = "hung", "trial deadline reached; everything was killed" + (f" ({error})" if error else "")
        inj = self.inj
        self.fig["inject_phase"] = self._inject_phase()
        first = min(detects, key=lambda e: e["t"]) if detects else {}
        first_rank = min((e for e in detects if e.get("src") == "rank"), key=lambda e: e["t"], default={})
        target = str(inj["component"]) if inj.get("component") else ",".join(map(str, sorted(self.victims)))
        return FaultFigures(
            fault=int(inj.get("fault", 0)),
            kind=str(inj.get("kind", "")),
            target=target,
            mechanism=_mechanism(inj),
            outcome=outcome,
            figures=self.fig,
            phases=self.phase_fig,
            error=error,
            interposer=self._interposer(),
            detect_how=str(first.get("how", "")),
            detect_site=str(first_rank.get("site", "")),
        )

    def _inject_phase(self) -> float:
        """Time since the victims' last step end, in fault-free steps (NaN without one)."""
        ends = [e["t"] for e in self.pre_steps if int(e.get("rank", -1)) in self.victims]
        if not ends or not self.trial.ff_step_s > 0:
            return NAN
        return _s(self.t0 - max(ends)) / self.trial.ff_step_s

    def _interposer(self) -> str:
        """What the ranks had in their collective path when the fault hit."""
        starts = [e for e in self.trial.events if e["event"] == "train_start" and e["t"] <= self.t0]
        return str(starts[-1].get("interposer", "")) if starts else ""

    def _by_victim(self, e: Event) -> bool:
        return e.get("src") == "rank" and int(e.get("rank", -1)) in self.victims

    def _undetected(self) -> tuple[str, str]:
        """Nothing noticed: how slow were the steps while the fault lasted (until its
        fault_end; one-shot faults: until the next fault or the end)?"""
        trial, window = self.trial, self.window
        ends = [e["t"] for e in window if e["event"] == "fault_end" and e.get("fault") == self.inj.get("fault")]
        t_end = min(ends) if ends else math.inf
        during = [
            float(e["step_s"])
            for e in window
            if e["event"] == "step_end" and e["t"] - float(e["step_s"]) * 1e9 <= t_end
        ]
        self.fig["degraded_step_ratio"] = _ratio(during, trial.ff_step_s)
        self.fig["loss_delta"] = trial.loss_delta
        # The last fault of a trial is absorbed if the job then finished; an earlier one
        # if training went on until the next fault came.
        last = window[-1]["t"] >= trial.events[-1]["t"]
        went_on = trial.facts.completed if last else any(e["event"] == "step_end" for e in window)
        self.fig["steps_lost"] = 0.0 if went_on else NAN
        if last and trial.facts.completed and trial.corrupted:
            return "corrupted", trial.corrupted
        if went_on:
            return "absorbed", ""
        return "failed", "job ended without completing and nothing detected a fault"

    def _detected(self, t_detect: int, detects: list[Event]) -> tuple[str, str]:
        trial, window, fig = self.trial, self.window, self.fig
        fig["ttd_s"] = self.phase_fig["phase_detect_s"] = _s(t_detect - self.t0)
        survivors = {int(e["rank"]) for e in self.pre_steps if int(e.get("gen", 0)) == self.last_gen} - self.victims
        firsts: dict[int, int] = {}
        for e in detects:
            if e.get("src") == "rank" and int(e["rank"]) in survivors:
                firsts.setdefault(int(e["rank"]), e["t"])
        if firsts:
            fig["ttd_rank_s"] = _s(min(firsts.values()) - self.t0)
        if survivors and set(firsts) == survivors:
            fig["ttd_all_s"] = _s(max(firsts.values()) - self.t0)

        committed = max(
            (int(e["step"]) for e in trial.events if e["event"] == "step_end" and e["t"] < t_detect), default=0
        )
        reconf = [e for e in window if e["event"] == "reconfigured" and e["t"] >= t_detect]
        min_gen = min((int(e["gen"]) for e in reconf), default=self.last_gen)
        after = [
            e for e in window if e["event"] == "step_end" and e["t"] > t_detect and int(e.get("gen", 0)) >= min_gen
        ]
        good = [e for e in after if int(e["step"]) > committed]
        if not good:
            return "failed", "" if reconf else "job stopped at the fault"
        first_good = min(good, key=lambda e: e["t"])
        good_key = (int(first_good.get("gen", 0)), int(first_good["step"]))
        t_good = max(e["t"] for e in good if (int(e.get("gen", 0)), int(e["step"])) == good_key)
        fig["ttr_s"] = _s(t_good - t_detect)
        fig["downtime_s"] = fig["ttd_s"] + fig["ttr_s"]
        self._full_strength(after)
        self._transfers()
        fig["steps_lost"] = float(max(0, committed - min(int(e["step"]) for e in after) + 1))
        fig["degraded_step_ratio"] = _ratio([float(e["step_s"]) for e in after if e["t"] > t_good], trial.ff_step_s)
        fig["loss_delta"] = trial.loss_delta
        self._phases(t_detect, t_good)
        return "recovered", ""

    def _full_strength(self, after: list[Event]) -> None:
        """``ttfs_s``: the first step of a post-fault world as large as the one before."""
        pre_size = max(
            (int(e.get("world_size", 0)) for e in self.pre_steps if int(e.get("gen", 0)) == self.last_gen), default=0
        )
        full = [
            e for e in after if int(e.get("world_size", 0)) >= pre_size > 0 and int(e.get("gen", 0)) > self.last_gen
        ]
        if full:
            first = min(full, key=lambda e: e["t"])
            key = (int(first.get("gen", 0)), int(first["step"]))
            self.fig["ttfs_s"] = _s(
                max(e["t"] for e in full if (int(e.get("gen", 0)), int(e["step"])) == key) - self.t0
            )

    def _transfers(self) -> None:
        """Discarded iterations of survivors, and the longest state transfer."""
        discards: dict[object, int] = {}
        for e in self.window:
            if e["event"] == "discard" and not self._by_victim(e):
                discards[e.get("pid")] = discards.get(e.get("pid"), 0) + 1
        self.fig["steps_discarded"] = float(max(discards.values(), default=0))
        starts = {e.get("pid"): e["t"] for e in self.window if e["event"] == "restore_start"}
        transfers = [
            (e["t"] - starts[e.get("pid")], e.get("bytes"))
            for e in self.window
            if e["event"] == "restore_end" and e.get("pid") in starts
        ]
        if transfers:
            longest = max(transfers, key=lambda x: x[0])
            self.fig["restore_s"] = _s(longest[0])
            self.fig["restore_bytes"] = float(longest[1]) if longest[1] is not None else NAN

    def _phases(self, t_detect: int, t_good: int) -> None:
        boundary = t_detect
        for name, spec in self.trial.phases:
            event_name, _, src = spec.partition("@")  # "event" or "event@src"
            ts = [
                e["t"]
                for e in self.window
                if e["event"] == event_name and (not src or e.get("src") == src) and t_detect <= e["t"] <= t_good
            ]
            if ts:
                self.phase_fig[phase_column(name)] = _s(max(ts) - boundary)
                boundary = max(ts)
        self.phase_fig["phase_catchup_s"] = _s(t_good - boundary)


def _corruption(facts: TrialFacts, reference: TrialFacts | None) -> str:
    """Why the final state is wrong ("" if it is not, or cannot be known)."""
    if len(facts.final_digests) > 1:
        return f"replicas diverged: {len(facts.final_digests)} different final parameter digests"
    ref = reference.final_l1 if reference else NAN
    if not (math.isnan(ref) or math.isnan(facts.final_l1)):
        rel = abs(facts.final_l1 - ref) / max(abs(ref), 1e-30)
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


def _s(ns: int) -> float:
    return ns / 1e9


def _ratio(samples: Sequence[float], base: float) -> float:
    if not samples or math.isnan(base) or base <= 0:
        return NAN
    return statistics.median(samples) / base


def _goodput(facts: TrialFacts, ff_step_s: float) -> float:
    if facts.train_start_ns is None or facts.train_end_ns is None or math.isnan(ff_step_s):
        return NAN
    wall = _s(facts.train_end_ns - facts.train_start_ns)
    return facts.steps_done * ff_step_s / wall if wall > 0 else NAN
