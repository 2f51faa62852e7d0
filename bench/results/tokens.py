"""The data-position and throughput figures of a trial, from ``step_end`` events.

A workload that reports its data position (``batch``: the global batch of its stream a
step read, and ``tokens``: the tokens of one global batch; the transformer workload
does) gets three figures; any other gets NaN, never 0.

- ``tokens_skipped`` / ``tokens_repeated``: the run's *lineage* is, for every step
  number, its last execution (the latest generation that ran it: a replayed step
  supersedes the lost one), in step order. Of the batches the lineage read, a batch
  read twice is repeated and a batch below the furthest one read that no step read is
  skipped; each counts its tokens. A stack that restores the weights but not the stream
  position shows here instead of as an unexplained ``loss_delta``.
- ``tokens_per_s``: tokens of one global batch over the median fault-free world step
  time (the slowest rank's ``step_s`` of each step past the warm-up and before the
  first injection).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from bench.procs.events import Event

NAN = math.nan


def token_figures(events: Sequence[Event], *, warmup_steps: int) -> dict[str, float]:
    steps = [e for e in events if e["event"] == "step_end" and e.get("batch") is not None and e.get("tokens")]
    if not steps:
        return {"tokens_skipped": NAN, "tokens_repeated": NAN, "tokens_per_s": NAN}
    tokens = int(steps[0]["tokens"])
    lineage: dict[int, tuple[int, int]] = {}
    """step -> (generation, batch read) of its last execution."""
    for e in steps:
        step, gen = int(e["step"]), int(e.get("gen", 0))
        if step not in lineage or gen >= lineage[step][0]:
            lineage[step] = (gen, int(e["batch"]))
    read = [lineage[s][1] for s in sorted(lineage)]
    distinct = set(read)
    repeated = len(read) - len(distinct)
    skipped = max(distinct) + 1 - len(distinct)
    first_inject = min((e["t"] for e in events if e["event"] == "inject"), default=None)
    world: dict[tuple[int, int], float] = {}
    for e in steps:
        if int(e["step"]) > warmup_steps and (first_inject is None or e["t"] < first_inject):
            key = (int(e.get("gen", 0)), int(e["step"]))
            world[key] = max(world.get(key, 0.0), float(e["step_s"]))
    step_s = statistics.median(world.values()) if world else NAN
    return {
        "tokens_skipped": float(skipped * tokens),
        "tokens_repeated": float(repeated * tokens),
        "tokens_per_s": tokens / step_s if step_s > 0 else NAN,
    }
