"""What a job printed around its fault, beside its timeline: the lines that said it.

A command job's output is kept per trial with the moment each line arrived
(``*.lines``, :mod:`bench.strategies.command.output`); a rank of ftbench's own keeps its
stderr in ``rank*.log`` without stamps. For the trial a timeline shows, this picks the
lines from just before the injection to a little after the recovery (or the end),
tracebacks cut to what they say, so that a reader sees what the job itself said when it
noticed the fault and when it came back.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from bench.procs.events import read_events

BEFORE_S = 1.0
"""Seconds of output before the injection."""
AFTER_S = 3.0
"""Seconds after the recovery (or the detection) that are still shown."""
MAX_LINES = 30
FRAME = re.compile(r"^(?:\[\w+\]:)?\s*(?:[\^~]+|File \".*\", line \d+, in \S+)\s*$")
"""A traceback's frame lines and caret lines: its first and last lines say what happened."""


def around_fault(events_dir: Path, downtime_s: float = math.nan) -> tuple[list[str], int]:
    """The lines to show (``+0.019 s  cmd0.rank1 err  text``, relative to the first
    injection), in the order they came, tracebacks cut to their first and last lines,
    and how many more lines the window held; ([], 0) without output."""
    files = sorted(events_dir.glob("*.lines"))
    if not files:
        return [], 0
    from bench.strategies.command.output import read_lines  # a report may read any run's files

    injects = [e["t"] for e in read_events(events_dir) if e["event"] == "inject"]
    if not injects:
        return [], 0
    t0 = min(injects)
    end = t0 + int(((downtime_s if not math.isnan(downtime_s) else 0.0) + AFTER_S) * 1e9)
    window = [
        (t, i, n, path.stem, stream, text)
        for i, path in enumerate(files)
        for n, (t, stream, text) in enumerate(read_lines(path))
        if t0 - BEFORE_S * 1e9 <= t <= end
    ]
    window.sort()
    kept = [w for w in window if not FRAME.match(w[5])]
    shown = kept[:MAX_LINES]
    lines = [f"{(t - t0) / 1e9:+8.3f} s  {name:<12} {stream}  {text[:160]}" for t, _, _, name, stream, text in shown]
    return lines, len(window) - len(shown)
