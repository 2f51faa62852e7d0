"""Thin observers around NVRx's in-process restart: events only, NVRx's behaviour unchanged.

The Wrapper calls an Abort, a Finalize, a HealthCheck, an Initialize and a RankAssignment
at fixed points of its restart. Each one it is given here is NVRx's own object (or
NVRx's default of none) behind a subclass of the same NVRx base class (the Wrapper
checks the types) that records ``nvrx_<name>_start`` / ``nvrx_<name>_end`` around the
call and passes its argument and result through. Those events are the boundaries of the
strategy's phases.

Detection is NVRx's own too, stamped by wrapping two methods of NVRx's store mixin
(:func:`observe_store`):

- ``wait_for_interrupted`` returns in a rank's monitor thread when somebody recorded an
  interruption: that rank has learnt of the fault (``detect``, how ``nvrx_monitor_thread``);
- ``record_interrupted``, called by a monitor process (a dead or late rank), a sibling
  monitor (an unresponsive monitor process) or a rank's main thread: the interruption
  NVRx registered (``nvrx_interrupted``, kind ``<interruption>``). Monitor processes
  are forked from their rank and write an event file of their own (src
  ``nvrx_monitor``). This is no ``detect`` of its own: the monitor processes of ranks
  that finished training record them as terminated too, when nobody trains any more;
  a record during training reaches the survivors through their monitor threads.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nvidia_resiliency_ext.inprocess.abort import Abort
from nvidia_resiliency_ext.inprocess.finalize import Finalize
from nvidia_resiliency_ext.inprocess.health_check import HealthCheck
from nvidia_resiliency_ext.inprocess.initialize import Initialize
from nvidia_resiliency_ext.inprocess.rank_assignment import RankAssignment
from nvidia_resiliency_ext.inprocess.store import StoreMixin

from bench.procs.events import EventWriter

Emit = Callable[..., Any]


def _around(emit: Emit, name: str, inner: Callable[[Any], Any] | None, arg: Any, **fields: Any) -> Any:
    """``inner(arg)`` between two events; no inner (NVRx's default ``None``): ``arg``."""
    emit(f"nvrx_{name}_start", **fields)
    out = arg if inner is None else inner(arg)
    emit(f"nvrx_{name}_end", **fields)
    return out


class ObservedAbort(Abort):
    """Called by the monitor thread once an interruption is seen (after last_call_wait)."""

    def __init__(self, inner: Abort | None, emit: Emit) -> None:
        self.inner, self.emit = inner, emit

    def __call__(self, state: Any) -> Any:
        return _around(self.emit, "abort", self.inner, state, iteration=state.iteration)


class ObservedFinalize(Finalize):
    """Called by the main thread once interrupted, before the health check."""

    def __init__(self, inner: Finalize | None, emit: Emit) -> None:
        self.inner, self.emit = inner, emit

    def __call__(self, state: Any) -> Any:
        return _around(self.emit, "finalize", self.inner, state, iteration=state.iteration)


class ObservedHealthCheck(HealthCheck):
    """Called twice per restart: after Finalize (``restart_health``), and at the start of
    every iteration (``iteration_health``): the first call of an iteration is the latter."""

    def __init__(self, inner: HealthCheck | None, emit: Emit) -> None:
        self.inner, self.emit = inner, emit
        self.seen: set[int] = set()

    def __call__(self, state: Any) -> Any:
        name = "restart_health" if state.iteration in self.seen else "iteration_health"
        self.seen.add(state.iteration)
        return _around(self.emit, name, self.inner, state, iteration=state.iteration)


class ObservedInitialize(Initialize):
    """Called at the start of every iteration, before its health check."""

    def __init__(self, inner: Initialize | None, emit: Emit) -> None:
        self.inner, self.emit = inner, emit

    def __call__(self, state: Any) -> Any:
        return _around(self.emit, "initialize", self.inner, state, iteration=state.iteration)


class ObservedRankAssignment(RankAssignment):
    """Called once before the first iteration and after every iteration barrier."""

    def __init__(self, inner: RankAssignment, emit: Emit) -> None:
        self.inner, self.emit = inner, emit

    def __call__(self, ctx: Any) -> Any:
        terminated = sorted(ctx.terminated_ranks)
        self.emit("nvrx_rank_assignment_start", iteration=ctx.state.iteration, terminated=terminated)
        out = self.inner(ctx)
        s = out.state
        self.emit("nvrx_rank_assignment_end", iteration=s.iteration, rank=s.rank, world_size=s.world_size)
        return out


class StoreEvents:
    """Where the store observers write: the rank's own event log in the rank process, a
    file per process in the monitor processes NVRx forks from it."""

    def __init__(self, rank_events: EventWriter, events_dir: Path, rank: int) -> None:
        self.rank_events = rank_events
        self.events_dir = events_dir
        self.rank = rank
        self.rank_pid = os.getpid()
        self.forked: EventWriter | None = None

    def emit(self, event: str, **fields: Any) -> None:
        pid = os.getpid()
        if pid == self.rank_pid:
            self.rank_events.emit(event, **fields)
            return
        if self.forked is None or self.forked.base.get("pid") != pid:
            path = self.events_dir / f"nvrx-monitor{self.rank}-{pid}.jsonl"
            self.forked = EventWriter(path, src="nvrx_monitor", pid=pid, of_rank=self.rank)
            self.forked.emit("proc_start", role="nvrx_monitor")
        self.forked.emit(event, **fields)


def interruptions(records: Any) -> list[Any]:
    """NVRx's interruption records, flat: a monitor process passes on the list a rank's
    main thread sent it inside another list (NVRx itself only ever prints them)."""
    flat: list[Any] = []
    for r in records or ():
        if isinstance(r, (list, tuple)):
            flat += interruptions(r)
        elif hasattr(r, "interruption"):
            flat.append(r)
    return flat


def observe_store(events: StoreEvents) -> None:
    """Wrap NVRx's ``wait_for_interrupted`` and ``record_interrupted`` (once per process:
    NVRx's own classes are patched, as restart's agent methods are)."""
    if getattr(StoreMixin, "_ftbench_observed", False):
        return
    StoreMixin._ftbench_observed = True
    waited = StoreMixin.wait_for_interrupted
    recorded = StoreMixin.record_interrupted

    @functools.wraps(waited)
    def wait_for_interrupted(self: Any, timeout: Any) -> Any:
        out = waited(self, timeout)  # raises on timeout: nothing recorded yet
        events.emit("detect", how="nvrx_monitor_thread")
        return out

    @functools.wraps(recorded)
    def record_interrupted(self: Any, records: Any = None) -> Any:
        for r in interruptions(records):
            events.emit("nvrx_interrupted", kind=r.interruption.name.lower(), of_nvrx_rank=r.rank)
        return recorded(self, records)

    StoreMixin.wait_for_interrupted = wait_for_interrupted
    StoreMixin.record_interrupted = record_interrupted
