"""The checkpoint figures of a trial, from ``checkpoint`` and ``checkpoint_done`` events.

One save is one (generation, step): designs where every rank writes emit one event per
rank, ``torch-save`` one from group rank 0. The loop of every rank waits for the slowest
at its next collective, so a save held training for the longest ``blocked_s`` among its
ranks; what it wrote is the sum of the ranks' ``bytes`` (taken from ``checkpoint_done``
where an asynchronous save only knew them once finished).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from bench.procs.events import Event

NAN = math.nan


def checkpoint_figures(events: Sequence[Event]) -> dict[str, float]:
    """``checkpoint_s`` (the sum over saves of the time they held training),
    ``checkpoint_blocked_s`` and ``checkpoint_background_s`` (medians per save; the
    latter over asynchronous saves that finished), ``checkpoint_bytes`` (the last save
    whose size is known, every rank together)."""
    blocked: dict[tuple[int, int], float] = {}
    written: dict[tuple[int, int], int] = {}
    late: dict[tuple[int, int], int] = {}
    background: dict[tuple[int, int], float] = {}
    order: dict[tuple[int, int], int] = {}
    for e in events:
        if e["event"] not in ("checkpoint", "checkpoint_done"):
            continue
        key = (int(e.get("gen", 0)), int(e["step"]))
        if e["event"] == "checkpoint":
            held = float(e["blocked_s"] if "blocked_s" in e else e["save_s"])
            blocked[key] = max(blocked.get(key, held), held)
            order[key] = max(order.get(key, e["t"]), e["t"])
            if e.get("bytes") is not None:
                written[key] = written.get(key, 0) + int(e["bytes"])
        else:
            went = float(e["background_s"])
            background[key] = max(background.get(key, went), went)
            if e.get("bytes") is not None:
                late[key] = late.get(key, 0) + int(e["bytes"])
    sizes = {k: late.get(k, 0) + written.get(k, 0) for k in order if k in late or k in written}
    last = max(sizes, key=lambda k: order[k], default=None)
    return {
        "checkpoint_s": sum(blocked.values()) if blocked else NAN,
        "checkpoint_blocked_s": statistics.median(blocked.values()) if blocked else NAN,
        "checkpoint_background_s": statistics.median(background.values()) if background else NAN,
        "checkpoint_bytes": float(sizes[last]) if last is not None else NAN,
    }
