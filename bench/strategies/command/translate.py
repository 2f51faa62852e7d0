"""From what a command job showed to the events every figure is computed from.

The probe's records (:mod:`bench.probe.site.ftbench_probe`) are raw: steps counted per
process, exceptions as they left torch. This module turns them, with the job's progress
lines (:mod:`bench.strategies.command.progress`), into the events the figures read
(:mod:`bench.results.derive`), once a trial is over, leaving the files as they are:

- **Steps.** Each generation's steps (a torchrun restart is a new generation) are put on
  the job's own count: a progress line ``step N`` read at time t follows the printing
  rank's last optimizer step before t, so N minus that step's count is the generation's
  offset (the largest over its lines: a line read late can only make it smaller).
  Where the optimizer's state counts steps (Adam), the probe did so already. A
  restarted generation whose offset nothing tells is a blind spot: its steps are put
  right after the last step before the fault, ``steps_lost`` is empty and says why.
- **Detections.** A ``raised`` whose message is a collective failure becomes a
  ``detect`` (how it was noticed, where); any other becomes a ``crash``.
- **Loss.** A progress line's loss goes on its step (the printing rank's); without one,
  ``loss_delta`` is empty and says why.
- **Phases.** Each process's first step of a generation is a ``first_step``: the phase
  that ends there holds the restarted job's first step, so that ``catchup`` after it
  holds as many steps as were lost (0 when none were). A restarted generation whose
  model wrapping or checkpoint load the probe did not see has its ``build`` or
  ``restore`` listed as blind; where its resume step is unknown, its ``catchup`` too.
- **The end.** A job whose commands all exited 0 finished: each rank of the last
  generation gets a ``train_end`` at its last step.

What cannot be known from outside is listed as ``blind`` (figure ->
reason) and those figures are left empty, never guessed (:class:`bench.jobs.job.Observed`).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence

from bench.jobs.job import Observed
from bench.procs.events import Event
from bench.rank.comm import classify
from bench.strategies.command.progress import ProgressLine


def translate(events: Sequence[Event], progress: Sequence[ProgressLine], *, finished: bool) -> Observed:
    """The trial's events with the probe's records turned into the figures' events."""
    blind: dict[str, str] = {}
    steps = [e for e in events if e["event"] == "step_end" and e.get("src") == "rank" and "count" in e]
    others = [e for e in events if not (e["event"] == "step_end" and "count" in e) and e["event"] != "raised"]
    if not steps and progress:
        steps = _from_progress(progress)
        blind["phases"] = "steps come from progress lines, stamped when the harness read them"
    aligned = _align(steps, progress, blind)
    out = others + aligned + _detections(events) + _first_steps(aligned)
    _losses(aligned, progress, blind)
    _unseen_phases(events, aligned, blind)
    last: int | None = None
    if finished and aligned:
        last_gen = max(int(e["gen"]) for e in aligned)
        final = [e for e in aligned if int(e["gen"]) == last_gen]
        last = max(int(e["step"]) for e in final)
        for rank in sorted({int(e["rank"]) for e in final}):
            end = max((e for e in final if int(e["rank"]) == rank), key=lambda e: e["t"])
            out.append(
                {"t": end["t"], "event": "train_end", "src": "rank", "rank": rank, "pid": end.get("pid"), "step": last}
            )
    if not steps:
        blind["steps"] = "the job showed no step: no torch optimizer stepped and no progress line matched"
    out.sort(key=lambda e: e["t"])
    return Observed(events=out, steps=last, blind=blind, sources=_sources(events, progress, blind))


def _sources(events: Sequence[Event], progress: Sequence[ProgressLine], blind: dict[str, str]) -> dict[str, str]:
    """Where each kind of figure came from in this trial."""
    kinds = {e["event"] for e in events}
    sites = sorted({str(e.get("site")) for e in events if e["event"] == "raised"})
    out = {
        "steps": "the optimizer's step hook (probe)" if "step_end" in kinds else "progress lines (read times)",
        "step numbers": "progress lines" if any(p.step is not None for p in progress) else "the optimizer's count",
        "detection": "exceptions out of " + ", ".join(sites) if sites else "none seen",
    }
    if "detect" in kinds:
        out["detection"] += "; the launcher's agent monitor"
    if any(p.loss is not None for p in progress):
        out["loss"] = "progress lines"
    if kinds & {"teardown_end", "rendezvous_end", "workers_started", "reconfigured", "quorum"}:
        out["phases"] = "the launcher's own lifecycle (agent), the probe's process groups and quorums"
    sights = [
        what for e, what in (("model_wrapped", "model wrapping"), ("restore_end", "checkpoint loads")) if e in kinds
    ]
    if sights:
        own = "the job's " + " and ".join(sights) + " (probe)"
        out["phases"] = f"{out['phases']}; {own}" if "phases" in out else own
    return {k: v for k, v in out.items() if k not in blind}


def _align(steps: list[Event], progress: Sequence[ProgressLine], blind: dict[str, str]) -> list[Event]:
    by_gen: dict[int, list[Event]] = defaultdict(list)
    for e in steps:
        by_gen[int(e.get("gen", 0))].append(e)
    timeline = _Timeline(steps)
    offsets: dict[int, int] = {}
    for line in progress:
        if line.step is None:
            continue
        latest = timeline.before(line.t, line.rank)
        if latest is None:
            continue
        gen = int(latest.get("gen", 0))
        shift = line.step - int(latest["step"])
        offsets[gen] = max(offsets.get(gen, shift), shift)
    out: list[Event] = []
    for gen in sorted(by_gen):
        offset = offsets.get(gen)
        if offset is None and gen > 0:
            # Nothing says where the restarted job resumed: its steps follow the last one
            # before, so that recovery ends at its first step; what it replayed is unknown.
            first = min(e["t"] for e in by_gen[gen])
            prior = [int(e["step"]) + offsets.get(int(e.get("gen", 0)), 0) for e in steps if e["t"] < first]
            offset = max(prior, default=0)
            blind["steps_lost"] = (
                "the step the restarted job resumed at is unknown (no progress line after the restart, and its "
                "optimizer's state does not count steps); recovery is counted to its first step"
            )
        for e in by_gen[gen]:
            out.append({**e, "step": int(e["step"]) + (offset or 0)})
    return out


class _Timeline:
    """The probe's steps by rank, in time order: the last one before a moment."""

    def __init__(self, steps: Sequence[Event]) -> None:
        ordered = sorted(steps, key=lambda e: e["t"])
        self.all = (ordered, [e["t"] for e in ordered])
        by_rank: dict[int, list[Event]] = defaultdict(list)
        for e in ordered:
            by_rank[int(e["rank"])].append(e)
        self.ranks = {r: (es, [e["t"] for e in es]) for r, es in by_rank.items()}

    def before(self, t: int, rank: int | None) -> Event | None:
        events, times = self.ranks.get(rank, self.all) if rank is not None else self.all
        i = bisect.bisect_right(times, t)
        return events[i - 1] if i else None


def _first_steps(aligned: Sequence[Event]) -> list[Event]:
    """A ``first_step`` at each process's first step of each generation."""
    firsts: dict[tuple[object, object, object], Event] = {}
    for e in aligned:
        key = (e.get("rank"), e.get("pid"), e.get("gen", 0))
        if key not in firsts or e["t"] < firsts[key]["t"]:
            firsts[key] = e
    return [
        {"t": e["t"], "event": "first_step", "src": "rank", "rank": e["rank"], "pid": e.get("pid"),
         "gen": e.get("gen", 0), "step": e["step"]}
        for e in firsts.values()
    ]  # fmt: skip


#: What the probe brackets, per phase, and the events that say it saw it.
PHASE_SIGHTS = {
    "phase_build_s": (
        "model_wrapped",
        "the restarted job wrapped no model in DistributedDataParallel or FSDP that the probe saw; its model's "
        "building, if any, is counted in first_step",
    ),
    "phase_restore_s": (
        "restore_end",
        "the restarted job loaded nothing with torch.load or torch.distributed.checkpoint that the probe saw; a "
        "load by other means, if any, is counted in first_step",
    ),
}


def _unseen_phases(events: Sequence[Event], aligned: Sequence[Event], blind: dict[str, str]) -> None:
    """The phases a restarted generation did not show (its steps do)."""
    restarted = {int(e.get("gen", 0)) for e in aligned} - {0}
    if not restarted:
        return
    for column, (event, why) in PHASE_SIGHTS.items():
        if not any(e["event"] == event and int(e.get("gen", 0)) in restarted for e in events):
            blind[column] = why
    if "steps_lost" in blind:
        blind["phase_catchup_s"] = "the step the restarted job resumed at is unknown: what it replayed is too"


def _detections(events: Sequence[Event]) -> list[Event]:
    """``raised`` records as detections or crashes, and each quorum a torchft rank joins
    with fewer replica groups than the one before: torchft's survivors may never see an
    error (the quorum simply waits for the lighthouse to drop the lost group), and the
    smaller quorum is when they learn of the loss, as ftbench's torchft strategy counts it."""
    out: list[Event] = []
    last: dict[int, int] = {}
    for e in events:
        if e["event"] == "quorum" and e.get("src") == "rank" and isinstance(e.get("replicas"), int):
            rank, replicas = int(e["rank"]), int(e["replicas"])
            if rank in last and replicas < last[rank]:
                base = {k: v for k, v in e.items() if k not in ("event", "replicas", "quorum_id")}
                out.append({**base, "event": "detect", "how": "quorum_drop", "site": "torchft_quorum"})
            last[rank] = replicas
    for e in events:
        if e["event"] != "raised":
            continue
        how = classify(str(e.get("error", "")))
        base = {k: v for k, v in e.items() if k not in ("event", "site", "type", "error")}
        if how == "error":
            out.append({**base, "event": "crash", "error": f"{e.get('type')}: {e.get('error')}"[:500]})
        else:
            out.append({**base, "event": "detect", "how": how, "site": e.get("site", ""), "error": e.get("error")})
    return out


def _losses(aligned: list[Event], progress: Sequence[ProgressLine], blind: dict[str, str]) -> None:
    """Put each progress line's loss on its step: on the lowest rank that ran it in the
    generation whose run of it came last before the line was read."""
    with_loss = [p for p in progress if p.loss is not None and p.step is not None]
    if not with_loss:
        blind["loss_delta"] = "the job's output shows no loss (no progress line with one matched)"
        return
    by_step: dict[int, list[Event]] = defaultdict(list)
    for e in aligned:
        by_step[int(e["step"])].append(e)
    for p in with_loss:
        assert p.step is not None
        ran = [e for e in by_step.get(p.step, ()) if e["t"] <= p.t]
        if not ran:
            continue
        gen = max(ran, key=lambda e: e["t"]).get("gen")
        target = min((e for e in ran if e.get("gen") == gen), key=lambda e: int(e["rank"]))
        target["loss_share"] = p.loss


def _from_progress(progress: Sequence[ProgressLine]) -> list[Event]:
    """Steps of a job no torch optimizer stepped in: its progress lines, one rank's."""
    out: list[Event] = []
    last_t: int | None = None
    for p in progress:
        if p.step is None:
            continue
        step_s = (p.t - last_t) / 1e9 if last_t is not None else 0.0
        rank = p.rank or 0
        out.append(
            {
                "t": p.t,
                "event": "step_end",
                "src": "rank",
                "rank": rank,
                "step": p.step,
                "count": p.step,
                "gen": 0,
                "world_size": 0,
                "step_s": step_s,
            }
        )
        last_t = p.t
    return out
