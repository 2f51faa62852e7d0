"""What a scale sweep records: one row per operation per point (:class:`Record`, the
columns of ``points.csv``) and why a coordinator's sweep ended (:class:`Stop`).

A figure that does not exist (the last participant of an operation not every
participant finished) is NaN here and an empty cell on disk, never 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Record:
    """One operation at one point, one repetition."""

    coordinator: str
    op: str
    n: int
    rep: int
    expected: int
    done: int = 0
    p50_s: float = math.nan
    p95_s: float = math.nan
    all_s: float = math.nan
    """When the last participant had its result (empty unless every one did)."""
    server_cpu_s: float = math.nan
    """The coordinator's CPU seconds (``/proc/PID/stat``, 10 ms ticks)."""
    server_run_s: float = math.nan
    """Seconds its threads ran on a CPU (``schedstat``, ns): the service it gave."""
    server_busy_s: float = math.nan
    """Seconds its threads ran or were runnable: how long it was busy, waits for a CPU
    included (on one machine the participants' work holds it off)."""
    client_cpu_s: float = math.nan
    """The participants' processes' CPU seconds during the operation (``getrusage``)."""
    sent_bytes: float = math.nan
    received_bytes: float = math.nan
    requests: float = math.nan
    """Segments that carried data to the coordinator: about one a request (system.Wire)."""
    replies: float = math.nan
    """Segments that carried data from it."""
    connections: float = math.nan
    setup_s: float = math.nan
    setup_retries: int = 0
    """Participants whose connection failed and was tried again (setup is not timed)."""
    late_s: float = math.nan
    workers: int = 0
    hosts: int = 1
    """Hosts whose processes held the participants (1: this machine)."""
    clock_err_s: float = 0.0
    """How far every time of the row may be off because the hosts' clocks are aligned
    within an error (the largest of the hosts': docs/multihost.md); 0 on one machine,
    whose processes share one CLOCK_MONOTONIC."""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.done == self.expected and not self.error


@dataclass
class Stop:
    """Why a coordinator's sweep ended before its largest size."""

    coordinator: str
    n: int
    limit: str
    """descriptors, ephemeral ports, thread ids, memory, time budget, error, skipped."""
    reason: str
    op: str = ""
    """The operation stopped (the others go on); "" for the whole coordinator."""
