"""NCCL's watchdog, observed from its log lines (GPU trials only).

With NCCL, a collective that hangs is not seen by the user's code as an exception: the
process group's watchdog thread notices the timeout, logs it, and (with
``TORCH_NCCL_ASYNC_ERROR_HANDLING``, on by default) tears the process down. That log line
is the stack's own detection, and it may be the last thing the rank does, so the harness
reads it from the rank's log file rather than from inside the rank: the rank's output
goes to ``rank<r>-<pid>.log`` beside its event log, and :class:`WatchdogLog` follows
those files and records each watchdog line as a ``detect`` of that rank with its own
``how``. The line's glog stamp (wall clock, microseconds or better) is mapped onto the
monotonic clock through the harness's own (wall, monotonic) pair read at the same
moment; where the stamp cannot be read, the moment the harness read the line is used
(``stamp = "read"``: up to one harness tick late).

Not run on this project's machines (no GPU); the line parsing is unit-tested on the
formats torch's ProcessGroupNCCL writes.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from bench.procs.events import EventWriter

#: (fragment, how): the watchdog's own words, first match wins.
PATTERNS: tuple[tuple[str, str], ...] = (
    ("Watchdog caught collective operation timeout", "nccl_watchdog_timeout"),
    ("Process group watchdog thread terminated with exception", "nccl_watchdog_exception"),
    ("Some NCCL operations have failed or timed out", "nccl_watchdog_teardown"),
)
_GLOG = re.compile(r"\[[EWIF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d+)")
_LOG_NAME = re.compile(r"rank(\d+)-(\d+)\.log")


def watchdog_how(line: str) -> str | None:
    for fragment, how in PATTERNS:
        if fragment in line:
            return how
    return None


def glog_wall_ns(line: str, now_wall_ns: int) -> int | None:
    """The wall-clock time of a glog line (``[E1218 20:27:21.426415540 ...``), in ns, taking
    the year from ``now`` (a line is read within moments of being written)."""
    m = _GLOG.search(line)
    if m is None:
        return None
    month, day, hh, mm, ss, frac = m.groups()
    year = time.gmtime(now_wall_ns / 1e9).tm_year
    try:
        base = time.mktime((year, int(month), int(day), int(hh), int(mm), int(ss), 0, 0, -1))
    except (OverflowError, ValueError):
        return None
    return int(base * 1e9) + int(frac.ljust(9, "0")[:9])


class WatchdogLog:
    """Follows the ranks' log files of one trial for watchdog lines."""

    def __init__(self, directory: Path, harness: EventWriter) -> None:
        self.directory = directory
        self.harness = harness
        self._offsets: dict[str, int] = {}

    def poll(self) -> None:
        try:
            names = [e.name for e in os.scandir(self.directory) if _LOG_NAME.fullmatch(e.name)]
        except FileNotFoundError:
            return
        for name in names:
            with open(self.directory / name, "rb") as fh:
                fh.seek(self._offsets.get(name, 0))
                data = fh.read()
            cut = data.rfind(b"\n") + 1
            self._offsets[name] = self._offsets.get(name, 0) + cut
            for raw in data[:cut].splitlines():
                self._line(name, raw.decode(errors="replace"))

    def _line(self, name: str, line: str) -> None:
        how = watchdog_how(line)
        if how is None:
            return
        m = _LOG_NAME.fullmatch(name)
        assert m is not None
        t_read, wall_read = time.monotonic_ns(), time.time_ns()
        wall_line = glog_wall_ns(line, wall_read)
        usable = wall_line is not None and 0 <= wall_read - wall_line < 60_000_000_000
        t = t_read - (wall_read - wall_line) if usable and wall_line is not None else t_read
        self.harness.emit(
            "detect",
            t=t,
            src="rank",
            rank=int(m[1]),
            pid=int(m[2]),
            how=how,
            stamp="log" if usable else "read",
            observed_by="harness",
            error=line[:300],
        )
