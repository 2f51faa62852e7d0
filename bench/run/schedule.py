"""When faults fire and whom they hit, from what the harness sees of a running trial.

:class:`TrialState` follows the event logs (which process is which rank or component,
how far training got). :class:`ScheduledFault` turns one ``[[faults]]`` entry into
firings: it evaluates the trigger, resolves the target to live processes (random
choices come from a generator seeded by the scenario seed, the trial and the fault, so
a trial's chaos schedule can be replayed), calls the injector and undoes transient
faults when their time is up. :func:`schedule` makes them for a trial: the entries of a
failure mix (:mod:`bench.scenario.mix`) get the firing times the mix drew for them.
Every firing is an event: ``inject`` (or ``arm`` for rank-side faults, whose hook
records ``inject`` itself when it acts), ``fault_end``, or ``inject_skipped`` with the
reason when no live target was left.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.procs.events import Event, EventWriter
from bench.procs.hygiene import alive
from bench.scenario import mix
from bench.scenario.faults import COMPONENTS, FAULTS, FaultSpec
from injectors.base import Target


@dataclass
class TrialState:
    """What the harness knows of a running trial, from the events so far."""

    pids: dict[int, int] = field(default_factory=dict)
    """Launch rank -> pid of its newest process."""
    components: dict[str, int] = field(default_factory=dict)
    """Control-plane component (store, lighthouse, agent) -> pid."""
    exited: set[int] = field(default_factory=set)
    hosts: dict[int, str] = field(default_factory=dict)
    """Launch rank -> host (``hN``) where host agents run it: torchrun's rendezvous, not
    the launch order, decides which host a rank lands on."""
    host_roots: dict[int, list[int]] = field(default_factory=dict)
    """Host index -> pids of the commands a command job started on it (what a whole-host
    fault takes down, with everything below them)."""
    max_step: int = 0
    first_step_t: int | None = None
    step_times: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    """Recent step times (s) of every rank: what one step takes now."""
    periods: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    """Recent intervals (s) between a rank's consecutive step ends: the step's period,
    which is its step time plus whatever the loop does between steps."""
    last_end: dict[int, int] = field(default_factory=dict)
    """Rank -> ``t`` of its latest step end."""

    def feed(self, e: Event) -> None:
        kind, src = e["event"], e.get("src")
        if kind == "proc_start" and src == "rank":
            self.pids[int(e["rank"])] = int(e["pid"])
            if "host" in e:
                self.hosts[int(e["rank"])] = str(e["host"])
        elif kind == "proc_start" and src in COMPONENTS:
            self.components[str(src)] = int(e["pid"])
        elif kind == "proc_exit" and src == "rank":
            self.exited.add(int(e["pid"]))
        elif kind == "command_start" and "host" in e:
            self.host_roots.setdefault(int(e["host"]), []).append(int(e["of_pid"]))
        elif kind == "step_end":
            self.max_step = max(self.max_step, int(e["step"]))
            self.step_times.append(float(e.get("step_s", 0.0)))
            rank, t = int(e.get("rank", -1)), int(e["t"])
            if rank in self.last_end and t > self.last_end[rank]:
                self.periods.append((t - self.last_end[rank]) / 1e9)
            self.last_end[rank] = t
            if self.first_step_t is None:
                self.first_step_t = e["t"]

    def step_s(self) -> float:
        """The median of the recent step times (0 before the first step)."""
        return statistics.median(self.step_times) if self.step_times else 0.0

    def period_s(self) -> float:
        """The median of the recent step periods (the step time before two steps ended)."""
        return statistics.median(self.periods) if self.periods else self.step_s()

    def live_ranks(self) -> list[int]:
        return sorted(r for r, pid in self.pids.items() if pid not in self.exited)

    def live_pids(self, ranks: list[int]) -> list[int]:
        return [self.pids[r] for r in ranks if r in self.pids and self.pids[r] not in self.exited]


@dataclass
class Firing:
    injector: Any
    t: int
    undo_at: int | None


class ScheduledFault:
    """One ``[[faults]]`` entry of a trial: its trigger, its target, its firings."""

    def __init__(
        self,
        index: int,
        spec: FaultSpec,
        *,
        seed: int,
        trial: int,
        ranks_per_host: int,
        namespaces: dict[int, str] | None = None,
        arrivals: list[float] | None = None,
    ) -> None:
        """``arrivals``: the firing times (s after the first step) a failure mix drew
        for this entry, which replace its own ``mtbf_s`` draws and its ``count``."""
        self.index = index
        self.spec = spec
        self.kind = FAULTS[spec.kind]
        self.rng = random.Random(f"{seed}:{trial}:{index}")
        self.ranks_per_host = ranks_per_host
        self.namespaces = namespaces or {}
        self.fired = 0
        self.deliver: Callable[[str, dict[str, Any]], None] | None = None
        """Set when host agents carry out the faults aimed at their hosts' ranks."""
        self.firings: list[Firing] = []
        self._last_step_seen = 0
        self._fire_at: int | None = None
        """When a firing whose trigger was met is due (later than the trigger with jitter)."""
        self._jitter_s = 0.0
        trig = spec.trigger
        self._arrivals: list[float] = [] if arrivals is None else list(arrivals)
        self._limit = trig.count if arrivals is None else len(arrivals)
        if trig.mtbf_s is not None and arrivals is None:
            t = 0.0
            for _ in range(trig.count):
                t += self.rng.expovariate(1.0 / trig.mtbf_s)
                self._arrivals.append(t)

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def fire_at(self) -> int | None:
        """When a firing whose trigger was met is due (monotonic ns), if one is."""
        return self._fire_at

    def poll(self, state: TrialState, now: int, harness: EventWriter) -> None:
        for firing in self.firings:
            if firing.undo_at is not None and now >= firing.undo_at:
                self._undo(firing, harness)
        if self.fired >= self.limit:
            return
        if self._fire_at is None and self._due(state, now):
            self._fire_at, self._jitter_s = self._moment(state, now)
        if self._fire_at is not None and now >= self._fire_at:
            self._fire_at = None
            self._fire(state, harness)

    def busy(self) -> bool:
        """Whether this fault still has to fire, or to be undone."""
        return self.fired < self.limit or any(f.undo_at is not None for f in self.firings)

    def undo_all(self, harness: EventWriter) -> None:
        for firing in self.firings:
            if firing.undo_at is not None:
                self._undo(firing, harness)

    def _moment(self, state: TrialState, now: int) -> tuple[int, float]:
        """(when to fire, the drawn part of a step) once the trigger is met.

        ``jitter = "step"``: a uniformly drawn point of a step, so that injections land
        anywhere in it (inside a collective or between them), as real faults do. The
        point is laid from a step boundary, the ranks' latest step end carried forward by
        whole periods to the first boundary not before ``now``, not from ``now``: the
        harness sees a step end some time after it happened (its event read from a file,
        a poll tick), and a draw from ``now`` would put every injection that much past
        the boundary, so that the phase was never uniform."""
        if self.spec.trigger.jitter != "step":
            return now, 0.0
        period = state.period_s()
        jitter = self.rng.uniform(0.0, period)
        if not state.last_end or period <= 0:
            return now + int(jitter * 1e9), jitter
        anchor, step_ns = max(state.last_end.values()), int(period * 1e9)
        boundary = anchor + max(0, -((anchor - now) // step_ns)) * step_ns
        return boundary + int(jitter * 1e9), jitter

    def _due(self, state: TrialState, now: int) -> bool:
        trig = self.spec.trigger
        if trig.at_step is not None:
            return state.max_step >= trig.at_step
        if state.first_step_t is None:
            return False
        since = (now - state.first_step_t) / 1e9
        if trig.after_s is not None:
            return since >= trig.after_s
        if trig.every_s is not None:
            return since >= trig.every_s * (self.fired + 1)
        if trig.mtbf_s is not None:
            return since >= self._arrivals[self.fired]
        if trig.probability is not None:
            new_steps = state.max_step - self._last_step_seen
            self._last_step_seen = state.max_step
            return any(self.rng.random() < trig.probability for _ in range(new_steps))
        return False

    def _targets(self, state: TrialState) -> tuple[list[int], list[int], str | None]:
        """(ranks, pids, component) hit by this firing."""
        t = self.spec.target
        if t.component is not None:
            pid = state.components.get(t.component)
            return [], ([pid] if pid else []), t.component
        live = state.live_ranks()
        if t.host is not None and self.kind.whole_host and state.host_roots:
            return self._host_of_commands(state, t.host)
        if t.ranks:
            ranks = list(t.ranks)
        elif t.host is not None and state.hosts:
            ranks = sorted(r for r in live if state.hosts.get(r) == f"h{t.host}")
        elif t.host is not None:
            ranks = list(range(t.host * self.ranks_per_host, (t.host + 1) * self.ranks_per_host))
        elif t.one:
            ranks = [self.rng.choice(live)] if live else []
        else:
            assert t.fraction is not None
            ranks = sorted(self.rng.sample(live, max(1, round(t.fraction * len(live))))) if live else []
        return ranks, state.live_pids(ranks), None

    @staticmethod
    def _host_of_commands(state: TrialState, host: int) -> tuple[list[int], list[int], str | None]:
        """A command job's host: the commands started there (the pids a whole-host
        fault is given) and the ranks running below them."""
        from injectors.signals import descendants

        roots = [p for p in state.host_roots.get(host, []) if alive(p)]
        below = {p for root in roots for p in descendants(root)} | set(roots)
        ranks = sorted(r for r, pid in state.pids.items() if pid in below and pid not in state.exited)
        return ranks, roots, None

    def _fire(self, state: TrialState, harness: EventWriter) -> None:
        self.fired += 1
        ranks, pids, component = self._targets(state)
        common: dict[str, Any] = dict(
            fault=self.index,
            kind=self.spec.kind,
            firing=self.fired,
            ranks=ranks,
            pids=pids,
            step=state.max_step,
            jitter_s=self._jitter_s,
            **({"component": component} if component else {}),
        )
        if not pids:
            harness.emit("inject_skipped", reason="no live process to hit", **common)
            return
        # Link faults act on the hosts' network namespaces, which on one machine are the
        # harness's to change (a cluster's hosts would need their agents to; refused there).
        if self.deliver is not None and component is None and self.kind.family != "link":
            self._deliver(state, harness, common)
            return
        injector = self.kind.injector(self.spec, self.index)
        target = Target(
            ranks=ranks, pids=pids, namespaces=sorted({ns for r in ranks if (ns := self._namespace(state, r))})
        )
        t = time.monotonic_ns()
        detail = injector.inject(target)
        t_sent = time.monotonic_ns()
        duration = getattr(injector, "duration_s", None)
        self.firings.append(
            Firing(injector=injector, t=t, undo_at=None if duration is None else t + int(duration * 1e9))
        )
        detail = {k: v for k, v in detail.items() if k not in common and k not in ("t", "event")}
        harness.emit("arm" if self.kind.rank_side else "inject", t=t, t_sent=t_sent, **common, **detail)

    def _namespace(self, state: TrialState, rank: int) -> str:
        """The network namespace of ``rank``'s host: the host it was seen on where its
        stack placed it (torchrun's rendezvous, Ray's scheduler), else by launch order."""
        host = state.hosts.get(rank, "")
        if host[1:].isdigit():
            return self.namespaces.get(int(host[1:]) * self.ranks_per_host, "")
        return self.namespaces.get(rank, "")

    def _deliver(self, state: TrialState, harness: EventWriter, common: dict[str, Any]) -> None:
        """Hand the firing to the agents of the targets' hosts: each carries it out on its
        host's ranks, stamps ``inject`` (or ``arm``) on its own clock and undoes it when
        due. A fault spanning hosts is one injection per host."""
        assert self.deliver is not None
        by_host: dict[str, list[int]] = {}
        for r in common["ranks"]:
            by_host.setdefault(state.hosts.get(r, f"h{r // self.ranks_per_host}"), []).append(r)
        for host, ranks in sorted(by_host.items()):
            pids = state.live_pids(ranks)
            if pids:
                body = common | {"ranks": ranks, "pids": pids}
                self.deliver(
                    host,
                    {"op": "fault", "fault": self.index, "kind": self.spec.kind, "knobs": self.spec.knobs()}
                    | {"ranks": ranks, "pids": pids, "common": body},
                )
        harness.emit("inject_delegated", hosts=sorted(by_host), **common)

    def _undo(self, firing: Firing, harness: EventWriter) -> None:
        t = time.monotonic_ns()
        firing.injector.undo()
        firing.undo_at = None
        report = getattr(firing.injector, "report", None)
        harness.emit("fault_end", t=t, fault=self.index, kind=self.spec.kind, **({"report": report} if report else {}))


def schedule(
    faults: Sequence[FaultSpec],
    *,
    seed: int,
    trial: int,
    ranks_per_host: int,
    namespaces: dict[int, str] | None = None,
) -> list[ScheduledFault]:
    """The scheduled faults of one trial, the failure mix's drawn in advance."""
    found = mix.of(faults)
    drawn = found.draw(seed, trial) if found is not None else {}
    return [
        ScheduledFault(
            i, f, seed=seed, trial=trial, ranks_per_host=ranks_per_host, namespaces=namespaces, arrivals=drawn.get(i)
        )
        for i, f in enumerate(faults)
    ]
