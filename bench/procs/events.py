"""The event log: one JSON object per line, one file per process.

Every process of a trial (rank, launcher agent, harness, lighthouse) appends to its own
file with a single ``write(2)`` per line on an ``O_APPEND`` descriptor, so a process
killed at any instant leaves only whole lines behind and nothing sits in a buffer.

Each event carries ``t`` (``time.monotonic_ns()``: CLOCK_MONOTONIC, one clock for all
processes of a host, immune to NTP steps) and ``wall`` (``time.time_ns()``, to place the
trial in calendar time). Figures are differences of ``t`` only.

This module must not import torch: ranks write their first event before importing it.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Event = dict[str, Any]

CLOCK = "CLOCK_MONOTONIC via time.monotonic_ns(); shared by every process of one host"

HOST_ENV = "FTBENCH_HOST"
"""Set by a host agent (:mod:`bench.hosts.agent`) for itself and its ranks: every event
they write carries ``host``, so its stamps can be mapped onto the controller's clock."""
ADDRESS_ENV = "FTBENCH_HOST_ADDRESS"
"""Set by a host agent: the address the other hosts reach this one at, where a rank
serves what its peers on other hosts connect to (torchft's replica-group store)."""
CLOCKS_FILE = "clocks.json"
"""In a trial's events directory: each agent host's offset to the harness's clock and its
uncertainty (:mod:`bench.hosts.clock`); absent on one host."""
STAMPS = ("t", "t_sent")
"""Fields that are CLOCK_MONOTONIC stamps (mapped between hosts); the rest are durations."""


_encode = json.JSONEncoder(default=str, separators=(", ", ": ")).encode
"""One encoder for every event (``json.dumps`` with ``default=`` builds a new one per
call, a measurable share of a rank's time per step)."""

_RESERVED = frozenset(("t", "wall", "event"))


def _numbers_template(keys: tuple[str, ...], base: dict[str, Any]) -> str | None:
    """``, "k": %r`` for each key: the tail of an event whose fields are all plain
    numbers, filled by one ``%`` (an int's and a finite float's ``repr`` are their JSON);
    None where a key is not a plain ASCII identifier or would replace a base field, or
    where a base field would replace one of the line's own (``t``, ``wall``, ``event``)."""
    if not base.keys().isdisjoint(_RESERVED):
        return None
    if any(not (k.isascii() and k.isidentifier()) or k in base or k in _RESERVED for k in keys):
        return None
    return "".join(f', "{k}": %r' for k in keys)


class EventWriter:
    """Appends events for one process; ``base`` fields go into every line."""

    def __init__(self, path: str | Path, **base: Any) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        host = os.environ.get(HOST_ENV)
        self.base = ({"host": host} if host else {}) | base
        self._base_json = ", " + _encode(self.base)[1:-1] if self.base else ""
        self._templates: dict[tuple[str, ...], str | None] = {}

    def emit(self, event: str, *, t: int | None = None, **fields: Any) -> int:
        """Write one event and return its ``t`` (now, unless stamped earlier by the caller:
        an injector stamps ``t`` just before it acts, not after).

        An event whose fields are all ints and finite floats (``step_end``, which every
        rank writes after every step) is filled into a template cached per key set
        instead of going through the JSON encoder: the same line for less code. A rank
        writes it right after waiting in a collective, with cold caches, where the
        encoder's path cost ten times its warm time (docs/calibration.md)."""
        t = time.monotonic_ns() if t is None else t
        keys = tuple(fields)
        try:
            template = self._templates[keys]
        except KeyError:
            template = self._templates[keys] = _numbers_template(keys, self.base)
        values = tuple(fields.values())
        if (
            template is not None
            and type(t) is int
            and all(type(v) is int or (type(v) is float and v - v == 0) for v in values)
        ):
            head = f'{{"t": {t}, "wall": {time.time_ns()}, "event": {_encode(event)}{self._base_json}'
            line = f"{head}{template % values}}}\n"
        else:
            record = {"t": t, "wall": time.time_ns(), "event": event, **self.base, **fields}
            line = _encode(record) + "\n"
        os.write(self._fd, line.encode())
        return t

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class EventTail:
    """Follows every ``*.jsonl`` file of a directory, returning only complete new lines.

    The harness polls it every few milliseconds to see steps, detections and process
    starts as they happen, on the same cores as the ranks, so a poll must cost little:
    files stay open and are read from where the last read stopped (one ``read(2)`` per
    file), and the directory is listed again (new processes, new files) only every
    :data:`RELIST_S`. Close it when done.
    """

    RELIST_S = 0.02

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.clocks: dict[str, dict[str, Any]] = {}
        """Offsets of agent hosts known so far (:func:`to_controller`); set by the trial."""
        self._files: dict[str, int] = {}
        """File name -> open descriptor, in name order."""
        self._partial: dict[str, bytes] = {}
        self._listed = -math.inf

    def poll(self) -> list[Event]:
        now = time.monotonic()
        if now - self._listed >= self.RELIST_S:
            self._listed = now
            self._relist()
        events: list[Event] = []
        for name, fd in self._files.items():
            chunk = _read_all(fd)
            if not chunk:
                continue
            lines = (self._partial.pop(name, b"") + chunk).split(b"\n")
            if lines[-1]:
                self._partial[name] = lines[-1]
            events.extend(json.loads(line) for line in lines[:-1] if line.strip())
        return to_controller(events, self.clocks) if self.clocks else events

    def _relist(self) -> None:
        try:
            names = sorted(e.name for e in os.scandir(self.directory) if e.name.endswith(".jsonl"))
        except FileNotFoundError:
            return
        for name in names:
            if name not in self._files:
                try:
                    self._files[name] = os.open(self.directory / name, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
        self._files = dict(sorted(self._files.items()))

    def close(self) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files = {}


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def read_events(directory: str | Path) -> list[Event]:
    """Every complete event of a trial directory, ordered by ``t``.

    A line cut short by a killed writer (impossible with one write per line, but files
    may be copied mid-run) is skipped rather than failing the whole trial.
    """
    events: list[Event] = []
    for path in sorted(Path(directory).glob("*.jsonl")):
        events.extend(_lines(path))
    events = to_controller(events, read_clocks(directory))
    events.sort(key=lambda e: e["t"])
    return events


def read_clocks(directory: str | Path) -> dict[str, dict[str, Any]]:
    """``host -> {offset_ns, err_ns, start, end, ...}`` of a trial's agent hosts, as the
    harness wrote them (:mod:`bench.hosts.launcher`); {} on one host."""
    path = Path(directory) / CLOCKS_FILE
    if not path.exists():
        return {}
    raw = json.loads(path.read_text())
    return {str(h): dict(c) for h, c in raw.items() if isinstance(c, dict)}


def to_controller(events: list[Event], clocks: dict[str, dict[str, Any]]) -> list[Event]:
    """Stamps of agent hosts mapped onto the harness's clock, in place.

    An integer offset is added, so differences of two stamps of one host keep their
    nanosecond resolution; each mapped event carries ``t_err`` (ns), the uncertainty its
    host's offset adds to any figure that subtracts it from another host's stamp
    (:mod:`bench.results.window`). The original stamp stays as ``t_host``.
    """
    if not clocks:
        return events
    for e in events:
        clock = clocks.get(str(e.get("host", "")))
        if clock is None or "t_host" in e:
            continue
        e["t_host"] = e["t"]
        for name in STAMPS:
            if isinstance(e.get(name), int):
                e[name] += int(clock["offset_ns"])
        e["t_err"] = int(clock["err_ns"])
    return events


def _lines(path: Path) -> Iterator[Event]:
    with open(path, "rb") as fh:
        for line in fh:
            if line.endswith(b"\n") and line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue
