"""The resource figures of a trial, from the harness's ``resources`` event and the ranks'.

What the sampler saw and how (:mod:`bench.procs.resources`) is one event the harness
writes when a trial ends; this module turns it into the trial's figures:

- ``rss_rank_peak_bytes``: the largest peak resident set (the kernel's ``VmHWM``) of a
  process that ran the training loop (a pid of a ``src = rank`` event);
- ``rss_job_peak_bytes``: the largest sum of resident sets over the trial's processes
  alive at one sample (ranks, the stack's helpers, the store; not the harness);
- ``cuda_rank_peak_bytes``: the largest ``torch.cuda.max_memory_allocated`` a rank
  reported at ``train_end`` (ranks on GPUs only), and ``cuda_rank_reserved_peak_bytes``
  the largest ``torch.cuda.max_memory_reserved`` (what its caching allocator held from
  the driver: the memory other processes sharing the GPU could not have). Neither holds
  the CUDA context's own memory. They come from the ranks, sampled or not;
- ``job_procs`` / ``job_threads``: the most processes, and threads in them, alive at
  one sample;
- ``wire_bytes_per_step``: bytes the job's hosts sent per step over the steady state
  (the first step after the warm-up to the last before any injection): the counters'
  rate between the first and the last sample inside that window, times the mean step
  period over it (rate x period, so that samples and step ends need not line up).

A trial sampled without counters (no namespace) has no wire figure; a trial without the
event (``measure.resources`` off) has none of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from bench.procs.events import Event

NAN = math.nan

FIGURES = (
    "rss_rank_peak_bytes",
    "rss_job_peak_bytes",
    "cuda_rank_peak_bytes",
    "cuda_rank_reserved_peak_bytes",
    "wire_bytes_per_step",
    "job_procs",
    "job_threads",
)


def resource_figures(events: Sequence[Event], *, warmup_steps: int) -> dict[str, float]:
    out = dict.fromkeys(FIGURES, NAN)
    for figure, field in (
        ("cuda_rank_peak_bytes", "cuda_peak_bytes"),
        ("cuda_rank_reserved_peak_bytes", "cuda_reserved_peak_bytes"),
    ):
        cuda = [float(e[field]) for e in events if e["event"] == "train_end" and field in e]
        if cuda:
            out[figure] = max(cuda)
    sampled = next((e for e in events if e["event"] == "resources"), None)
    if sampled is None:
        return out
    ranks = {str(e["pid"]) for e in events if e.get("src") == "rank" and "pid" in e}
    procs = sampled.get("procs", {})
    peaks = [float(p["hwm"]) for pid, p in procs.items() if pid in ranks]
    out["rss_rank_peak_bytes"] = max(peaks) if peaks else NAN
    out["rss_job_peak_bytes"] = float(sampled.get("job_rss_peak", 0)) or NAN
    out["job_procs"] = float(sampled.get("procs_peak", 0)) or NAN
    out["job_threads"] = float(sampled.get("threads_peak", 0)) or NAN
    out["wire_bytes_per_step"] = _per_step(events, [(int(t), int(b)) for t, b in sampled.get("wire", [])], warmup_steps)
    return out


def _per_step(events: Sequence[Event], wire: list[tuple[int, int]], warmup_steps: int) -> float:
    first_inject = min((e["t"] for e in events if e["event"] == "inject"), default=None)
    world: dict[tuple[int, int], int] = {}  # (gen, step) -> its last rank's step_end
    for e in events:
        if e["event"] == "step_end" and int(e["step"]) > warmup_steps:
            key = (int(e.get("gen", 0)), int(e["step"]))
            world[key] = max(world.get(key, 0), int(e["t"]))
    ends = sorted(t for t in world.values() if first_inject is None or t < first_inject)
    if len(ends) < 2:
        return NAN
    inside = [(t, b) for t, b in wire if ends[0] <= t <= ends[-1]]
    if len(inside) < 2:
        return NAN
    (t0, b0), (t1, b1) = inside[0], inside[-1]
    if t1 <= t0:
        return NAN
    step_period = (ends[-1] - ends[0]) / (len(ends) - 1)
    return (b1 - b0) / (t1 - t0) * step_period


def roles(events: Sequence[Event]) -> dict[str, int]:
    """How many processes of each kind the sampler saw: a process that wrote events is
    named by their source (``rank``, ``store``, ``lighthouse``, ``nvrx_monitor``,
    ``agent``...), a silent child of such a process after its parent (``rank's child``:
    a monitor NVRx forks from a rank), any other by its command line."""
    sampled = next((e for e in events if e["event"] == "resources"), None)
    if sampled is None:
        return {}
    src = {str(e["pid"]): str(e.get("src")) for e in events if "pid" in e and e.get("src")}
    out: dict[str, int] = {}
    for pid, proc in sampled.get("procs", {}).items():
        parent = src.get(str(proc.get("ppid")))
        name = src.get(pid) or (f"{parent}'s child" if parent else _command(str(proc.get("name", "?"))))
        out[name] = out.get(name, 0) + 1
    return out


def _command(name: str) -> str:
    """A command line made readable: Python's multiprocessing children all start alike."""
    if "multiprocessing.spawn" in name:
        return "python (multiprocessing child)"
    if "multiprocessing.forkserver" in name:
        return "python (multiprocessing forkserver)"
    return name
