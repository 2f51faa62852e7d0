"""One injection and the events until the next: a fault's outcome, figures and phases
(how each is computed: :mod:`bench.results.derive`).
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.procs.events import Event
from bench.results.blame import attribution, blame_correct, false_alarm, hold_s, tolerance_s
from bench.results.facts import NAN, FaultFigures, TrialFacts, ratio, seconds
from bench.scenario.figures import FAULT_FIGURES, phase_column


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
    blame: Sequence[str] = ()
    """The strategy's blame records (:attr:`bench.strategies.Strategy.blame`)."""


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
        if detects and outcome in ("recovered", "failed"):
            why = false_alarm(self.inj, tolerance_s(self.trial.events))
            if why:
                outcome, error = "false_alarm", why + (f"; then {outcome}" + (f": {error}" if error else ""))
        self._attribution()
        crashes = self._survivor_crashes()
        self.fig["survivor_crashes"] = float(len(crashes))
        if crashes and outcome != "recovered":
            error = f"survivors crashed: rank {', '.join(map(str, sorted(crashes)))} ({crashes[min(crashes)]})"
        if self.trial.facts.hung:
            # A trial that reached its deadline is hung whatever happened before; the
            # figures it did produce (a detection, say) are kept.
            outcome, error = "hung", "trial deadline reached; everything was killed" + (f" ({error})" if error else "")
        inj = self.inj
        self.fig["inject_phase"] = self._inject_phase()
        first_step = min((e["t"] for e in self.trial.events if e["event"] == "step_end"), default=None)
        self.fig["inject_after_s"] = (
            NAN if first_step is None or first_step > self.t0 else seconds(self.t0 - first_step)
        )
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
            hold_s=_or_nan(hold_s(inj)),
            tolerance_s=_or_nan(tolerance_s(self.trial.events)),
            clock_err=clock_errors(inj, first, first_rank, self.window),
        )

    def _attribution(self) -> None:
        """``blame_correct`` and ``tta_s`` from the stack's own blame records."""
        att = attribution(self.window, self.trial.blame, self.victims)
        self.fig["blame_correct"] = blame_correct(att, self.victims)
        if att.t_first is not None:
            self.fig["tta_s"] = seconds(att.t_first - self.t0)

    def _survivor_crashes(self) -> dict[int, str]:
        """Ranks (not victims) that crashed after the injection, with their first error."""
        crashes: dict[int, str] = {}
        for e in self.window:
            if e["event"] == "crash" and e.get("src") == "rank" and int(e.get("rank", -1)) not in self.victims:
                crashes.setdefault(int(e["rank"]), _crash_text(e))
        return crashes

    def _inject_phase(self) -> float:
        """Time since the victims' last step end over their step period (the median
        interval between one victim's consecutive step ends before the fault, the same
        period the scheduler draws the moment in): 0-1, past 1 where the step the fault
        landed in ran longer than the median; NaN without two steps to measure it by."""
        ends: dict[int, list[int]] = {}
        for e in self.pre_steps:
            if int(e.get("rank", -1)) in self.victims:
                ends.setdefault(int(e["rank"]), []).append(int(e["t"]))
        periods = [b - a for ts in ends.values() for a, b in list(itertools.pairwise(sorted(ts)))[-64:] if b > a]
        if not periods:
            return NAN
        last = max(max(ts) for ts in ends.values())
        return (self.t0 - last) / statistics.median(periods)

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
        self.fig["degraded_step_ratio"] = ratio(during, trial.ff_step_s)
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
        fig["ttd_s"] = self.phase_fig["phase_detect_s"] = seconds(t_detect - self.t0)
        survivors = {int(e["rank"]) for e in self.pre_steps if int(e.get("gen", 0)) == self.last_gen} - self.victims
        firsts: dict[int, int] = {}
        for e in detects:
            if e.get("src") == "rank" and int(e["rank"]) in survivors:
                firsts.setdefault(int(e["rank"]), e["t"])
        if firsts:
            fig["ttd_rank_s"] = seconds(min(firsts.values()) - self.t0)
        if survivors and set(firsts) == survivors:
            fig["ttd_all_s"] = seconds(max(firsts.values()) - self.t0)

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
        fig["ttr_s"] = seconds(t_good - t_detect)
        fig["downtime_s"] = fig["ttd_s"] + fig["ttr_s"]
        self._full_strength(after)
        self._transfers()
        fig["steps_lost"] = float(max(0, committed - min(int(e["step"]) for e in after) + 1))
        fig["degraded_step_ratio"] = ratio([float(e["step_s"]) for e in after if e["t"] > t_good], trial.ff_step_s)
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
            self.fig["ttfs_s"] = seconds(
                max(e["t"] for e in full if (int(e.get("gen", 0)), int(e["step"])) == key) - self.t0
            )

    def _transfers(self) -> None:
        """Discarded iterations of survivors, and the longest state transfer."""
        discards: dict[object, int] = {}
        for e in self.window:
            if e["event"] == "discard" and not self._by_victim(e):
                discards[e.get("pid")] = discards.get(e.get("pid"), 0) + 1
        self.fig["steps_discarded"] = float(max(discards.values(), default=0))
        # Each end with the start before it in its process: a job may load several files.
        starts: dict[object, int] = {}
        transfers: list[tuple[int, float | None]] = []
        for e in self.window:
            if e["event"] == "restore_start":
                starts[e.get("pid")] = e["t"]
            elif e["event"] == "restore_end" and e.get("pid") in starts:
                size = e.get("bytes")
                transfers.append((e["t"] - starts.pop(e.get("pid")), None if size is None else float(size)))
        if transfers:
            longest = max(transfers, key=lambda x: x[0])
            self.fig["restore_s"] = seconds(longest[0])
            self.fig["restore_bytes"] = longest[1] if longest[1] is not None else NAN

    def _phases(self, t_detect: int, t_good: int) -> None:
        """Each phase runs from the boundary before it in time to its own: a job ftbench
        did not write may do what the strategy lists in another order (load its
        checkpoint before it wraps its model), and a phase is never negative."""
        ends: list[tuple[int, str]] = []
        for name, spec in self.trial.phases:
            event_name, _, src = spec.partition("@")  # "event" or "event@src"
            ts = [
                e["t"]
                for e in self.window
                if e["event"] == event_name and (not src or e.get("src") == src) and t_detect <= e["t"] <= t_good
            ]
            if ts:
                ends.append((max(ts), name))
        boundary = t_detect
        for t, name in sorted(ends, key=lambda end: end[0]):  # stable: declared order on a tie
            self.phase_fig[phase_column(name)] = seconds(t - boundary)
            boundary = t
        self.phase_fig["phase_catchup_s"] = seconds(t_good - boundary)


def _or_nan(value: float | None) -> float:
    return NAN if value is None else value


def _crash_text(e: Event) -> str:
    """``AssertionError at ddp.py:70 in callback``: the error and where it was raised (an
    ``assert`` has no message of its own)."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', str(e.get("traceback", "")))
    where = f" at {Path(frames[-1][0]).name}:{frames[-1][1]} in {frames[-1][2]}" if frames else ""
    return (str(e.get("error", "")).rstrip(": ") + where)[:200]


def _mechanism(inj: Event) -> str:
    """What served the fault: the injector's own word for link faults, else how."""
    if inj.get("mechanism"):
        return str(inj["mechanism"])
    if inj.get("src") == "rank":
        return "rank-side hook"
    return f"signal {inj['signal']}" if inj.get("signal") else ""


def clock_errors(inj: Event, first: Event, first_rank: Event, window: Sequence[Event]) -> dict[str, float]:
    """The clock-alignment uncertainty (s) of this fault's figures, in trials whose hosts
    have clocks of their own (events mapped by :func:`bench.procs.events.to_controller`
    carry ``t_err``); {} otherwise, so one host's trials.csv is unchanged.

    A difference of two stamps of one host is exact (0); of two hosts, the sum of their
    offsets' uncertainties (the harness's own clock has none). ``ttd_err_s`` and
    ``ttd_rank_err_s`` are those of the stamps the two figures subtract; ``clock_err_s``
    bounds every other figure of the fault: the two largest uncertainties among the
    hosts that wrote events in its window.
    """
    if not any("t_err" in e for e in window) and "t_err" not in inj:
        return {}

    def pair(a: Event, b: Event) -> float:
        if not a or not b:
            return NAN
        if a.get("host", "") == b.get("host", ""):
            return 0.0
        return (int(a.get("t_err", 0)) + int(b.get("t_err", 0))) / 1e9

    hosts: dict[str, int] = {str(inj.get("host", "")): int(inj.get("t_err", 0))}
    for e in window:
        hosts[str(e.get("host", ""))] = int(e.get("t_err", 0))
    top = sorted(hosts.values(), reverse=True)[:2]
    return {
        "ttd_err_s": pair(inj, first),
        "ttd_rank_err_s": pair(inj, first_rank),
        "clock_err_s": sum(top) / 1e9 if len(top) == 2 else 0.0,
    }
