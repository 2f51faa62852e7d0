"""The facts of one trial that do not depend on a fault, and the cells a fault's
figures fill: what :mod:`bench.results.window` measures each fault against and with.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bench.procs.events import Event
from bench.results.checkpoints import checkpoint_figures
from bench.results.resources import resource_figures
from bench.results.tokens import token_figures

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
    checkpoint_blocked_s: float = NAN
    checkpoint_background_s: float = NAN
    """The checkpoint figures (:mod:`bench.results.checkpoints`), NaN without saves."""
    final_digests: frozenset[str] = frozenset()
    """Parameter digests the ranks reported when they finished (one if replicas agree)."""
    final_l1: float = NAN
    """L1 norm of the final parameters (compared with the reference's)."""
    rss_rank_peak_bytes: float = NAN
    rss_job_peak_bytes: float = NAN
    cuda_rank_peak_bytes: float = NAN
    cuda_rank_reserved_peak_bytes: float = NAN
    wire_bytes_per_step: float = NAN
    job_procs: float = NAN
    job_threads: float = NAN
    """The resource figures (:mod:`bench.results.resources`), NaN unless sampled."""
    tokens_skipped: float = NAN
    tokens_repeated: float = NAN
    tokens_per_s: float = NAN
    """The data-position figures (:mod:`bench.results.tokens`), NaN unless the workload
    reports its position."""


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
    hold_s: float = NAN
    """How long the fault held its victims as a timeout sees it (a stall's duration, a
    straggler's delay), NaN for a fault without an end."""
    tolerance_s: float = NAN
    """The stack's smallest detection timeout in the trial (false alarms are judged by it)."""
    clock_err: dict[str, float] = field(default_factory=dict)
    """Multi-host trials only: ``*_err_s``, the clock-alignment uncertainty of figures
    that subtract stamps of two hosts (:func:`bench.results.window.clock_errors`)."""
    blind: str = ""
    """What could not be known in this trial and why (``figure: reason; ...``), for a
    job watched from outside; those figures are empty."""

    sources: str = ""
    """Where a job watched from outside showed what its figures come from
    (``steps: ...; detection: ...``)."""

    def observed_from_outside(self, blind: dict[str, str], sources: dict[str, str]) -> None:
        """Empty the figures and phases that cannot be known (``blind``: figure or phase
        column -> why), say why, and say where the rest came from."""
        for name in blind:
            for known in (self.figures, self.phases):
                if name in known:
                    known[name] = NAN
        self.blind = "; ".join(f"{k}: {v}" for k, v in sorted(blind.items()))
        self.sources = "; ".join(f"{k}: {v}" for k, v in sources.items())

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
            "hold_s": self.hold_s,
            "tolerance_s": self.tolerance_s,
            **self.clock_err,
            **({"blind": self.blind} if self.blind else {}),
            **({"sources": self.sources} if self.sources else {}),
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
    ends = [e for e in events if e["event"] == "train_end" and e.get("digest")]
    last_gen = max((int(e.get("gen", 0)) for e in ends), default=0)
    ends = [e for e in ends if int(e.get("gen", 0)) == last_gen]
    return TrialFacts(
        **resource_figures(events, warmup_steps=warmup_steps),
        final_digests=frozenset(str(e["digest"]) for e in ends),
        final_l1=float(ends[0]["l1"]) if ends and ends[0].get("l1") is not None else NAN,
        **checkpoint_figures(events),
        **token_figures(events, warmup_steps=warmup_steps),
        steps_done=len(done),
        completed=steps in done and any(e["event"] == "train_end" for e in events),
        hung=any(e["event"] == "trial_end" and e.get("outcome") == "hung" for e in events),
        final_loss=final_loss,
        ff_step_s=statistics.median(pre) if pre else NAN,
        train_start_ns=min(starts) if starts else None,
        train_end_ns=max(rank_ends) if rank_ends else None,
    )


def corruption(facts: TrialFacts, reference: TrialFacts | None) -> str:
    """Why the final state is wrong ("" if it is not, or cannot be known)."""
    if len(facts.final_digests) > 1:
        return f"replicas diverged: {len(facts.final_digests)} different final parameter digests"
    ref = reference.final_l1 if reference else NAN
    if not (math.isnan(ref) or math.isnan(facts.final_l1)):
        rel = abs(facts.final_l1 - ref) / max(abs(ref), 1e-30)
        if not rel <= CORRUPTION_RTOL:  # NaN and inf parameters count as corrupted
            return f"final parameters differ from the fault-free reference (relative L1 difference {rel:.3g})"
    return ""


def seconds(ns: int) -> float:
    return ns / 1e9


def ratio(samples: Sequence[float], base: float) -> float:
    if not samples or math.isnan(base) or base <= 0:
        return NAN
    return statistics.median(samples) / base


def goodput(facts: TrialFacts, ff_step_s: float) -> float:
    """The share of training wall time that made progress, at the fault-free step time.
    Held at 1: a world that steps faster after recovery than before (fewer ranks sharing
    the same cores, as ``degraded_step_ratio`` below 1 shows) would otherwise make a
    share of wall time over 100 %."""
    if facts.train_start_ns is None or facts.train_end_ns is None or math.isnan(ff_step_s):
        return NAN
    wall = seconds(facts.train_end_ns - facts.train_start_ns)
    return min(1.0, facts.steps_done * ff_step_s / wall) if wall > 0 else NAN
