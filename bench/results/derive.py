"""Figures of a trial, computed from its event log alone.

What each figure means is :mod:`bench.scenario.figures`; how it is computed, per fault:

- ``ttd_s``: first ``detect`` by any surviving process (rank, supervisor, agent,
  lighthouse) minus ``inject``. Detections by the fault's own victims (a stalled rank
  that wakes up) do not count: they are not the system noticing.
- ``ttd_rank_s``: the first ``detect`` of a surviving rank (the user's training code
  seeing the exception) minus ``inject``: what a bare torch.distributed loop can see.
- ``ttd_all_s``: the last surviving rank's first ``detect`` minus ``inject``; empty if
  some surviving rank never detected.
- ``inject_phase``: time since the victims' last ``step_end`` before the injection over
  their step period (the median interval between a victim's consecutive step ends):
  where in the step the fault landed, 0-1 (past 1 where the step it landed in ran longer
  than the median; a kill inside a collective is seen at once, one between collectives
  only at the next).
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
  time (first step start to the end of the job's last rank), held at 1 where the world
  after recovery steps faster than the fault-free one (``degraded_step_ratio`` < 1).
- ``degraded_step_ratio``: median step time after recovery / fault-free median; for a
  fault nobody detected, median time of the steps that ran while it lasted (inject to
  its ``fault_end``) / fault-free median: a straggler's cost.
- ``loss_delta``: final loss minus the fault-free reference's final loss (same point,
  same seed), when a reference was run.
- ``ttfs_s``: end of the first step of a post-fault world as large as the world before
  the fault, minus ``inject``.
- ``survivor_crashes``: ranks other than the victims whose training code raised out of
  the stack after the injection (a ``crash`` event): a stack whose own error handling
  takes the survivors down (torchft 0.2.0's DDP) shows here and in the error.
- ``steps_discarded``: ``discard`` events of a surviving process, the most of any.
- ``restore_s`` / ``restore_bytes``: the longest ``restore_start`` -> ``restore_end``
  of one process, and its size.
- ``blame_correct``: 1 when the ranks the stack named in its own blame records (the
  strategy's ``blame`` declaration: evictions, quorum drops, failure records, rank
  monitors) after the injection are exactly the fault's victims, 0 when not, empty when
  it named no one; ``tta_s``: its first such record minus ``inject``
  (:mod:`bench.results.blame`).
- outcome ``false_alarm``: something detected a fault whose hold (a stall's
  ``duration_s``, a straggler's ``delay_s``) is below the stack's tolerance, the
  smallest of its detection timeouts that the harness records in ``trial_start``.
- outcome ``corrupted``: nothing detected the fault, the job finished, and its final
  parameters are wrong: replicas disagree, or they differ from the reference's.
- an ``oom`` fault's figures count from the kill (``oom_kill``'s ``t_kill``, the
  kernel's stamp mapped onto CLOCK_MONOTONIC), not from the moment its limit was set.
- a rank the kernel's OOM killer ended (an ``oom_kill`` event: the harness reads the
  kernel's log after each trial, :mod:`bench.procs.oom`) is named in every row's
  ``error`` with the kernel's message, whatever the outcome: the end an ``oom`` fault
  brings about, and in any other trial a SIGKILL no fault of ftbench's sent.

A figure that does not exist for an outcome is NaN, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from bench.procs.events import Event
from bench.results.facts import NAN, FaultFigures, TrialFacts, corruption, goodput, trial_facts
from bench.results.window import FaultWindow, Trial
from bench.scenario.figures import FAULT_FIGURES


def fault_figures(
    events: Sequence[Event],
    *,
    faults: Sequence[tuple[str, str]],
    steps: int,
    warmup_steps: int,
    phases: Sequence[tuple[str, str]],
    reference: TrialFacts | None = None,
    blame: Sequence[str] = (),
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
        goodput=goodput(facts, ff_step_s),
        loss_delta=facts.final_loss - (reference.final_loss if reference else NAN),
        corrupted=corruption(facts, reference),
        blame=blame,
    )
    injects = [_at_the_kill(e, events) for e in events if e["event"] == "inject"]
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
    ooms = [e for e in events if e["event"] == "oom_kill"]
    if ooms:  # every row says so, whatever its outcome: an oom fault's own end, or no fault's
        note = "; ".join(
            f"rank {e['rank']} (pid {e['pid']}) was ended by the kernel's OOM killer ({e.get('message', '')})"
            for e in ooms
        )
        for r in results:
            r.error = f"{note}; {r.error}" if r.error else note
    return results


def _at_the_kill(inj: Event, events: Sequence[Event]) -> Event:
    """An ``oom`` fault counts from the moment the kernel killed its target (the
    ``oom_kill`` event's ``t_kill``), as a ``kill`` counts from its signal: the limit
    is set earlier (kept as ``t_limit``) and bites at the target's next allocation past
    it, which is the workload's doing, not the stack's. Other faults, and an oom whose
    target was not killed, are unchanged."""
    if inj.get("kind") != "oom":
        return inj
    pids = set(inj.get("pids", ()))
    kills = [int(e["t_kill"]) for e in events if e["event"] == "oom_kill" and e.get("pid") in pids and "t_kill" in e]
    kills = [t for t in kills if t >= inj["t"]]
    return {**inj, "t": min(kills), "t_limit": inj["t"]} if kills else inj


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
