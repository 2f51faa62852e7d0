"""The rank-side training loop, the same for every strategy that runs it.

It runs ``workload.steps`` steps and records them (``step_end``) and every failure it
sees (``detect``, how it was noticed). What a failure means, how a world is formed and
what happens between steps is the strategy's :class:`~bench.rank.policy.RankPolicy`.

Exit codes: see :mod:`bench.rank.entry`.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from bench.procs.events import EventWriter
from bench.rank.comm import CollectiveError
from bench.rank.entry import EndedByError, RankSpec, device, install_hooks
from bench.rank.policy import RAISE, Position, RankPolicy
from bench.rank.workload import Workload
from bench.scenario.registry import load_path

#: Objects that own process groups of past generations. They are never freed: a gloo
#: group's destructor joins a worker thread that may wait on a dead peer until its
#: timeout (or forever). The rank process ends with ``os._exit``, running no destructor.
RETIRED: list[Any] = []


def train(spec: RankSpec, events: EventWriter) -> int:
    """Train ``workload.steps`` steps under the spec's policy; returns the exit code."""
    torch.set_num_threads(1)
    hooks = install_hooks(spec, events)
    policy: RankPolicy = load_path(spec.policy)(spec, events, hooks)
    wl = spec.workload
    workload = build_workload(spec, events)
    RETIRED.append(workload)
    pos = policy.start(workload)
    if pos is None:
        return 0
    # cpu_s at train_start and train_end: the rank's CPU time (every thread), which
    # resolves ftbench's cost per step where wall time on shared cores cannot.
    events.emit(
        "train_start",
        gen=pos.world.gen,
        world_size=pos.world.size,
        step=pos.step,
        interposer=pos.comm.interposer,
        cpu_s=time.process_time(),
    )
    # between_s: wall time from each step's end to the next one's start (the step event,
    # then the policy: nothing else for fail-stop, a checkpoint where a strategy takes
    # one), so that what ftbench costs a fault-free step is attributed, not only bounded.
    between_s = 0.0
    while pos.step <= wl.steps:
        started = time.perf_counter()
        try:
            fields = workload.step(pos.step)
        except (CollectiveError, RuntimeError) as exc:
            err = pos.comm.as_failure(exc)
            if err is None:
                raise
            events.emit(
                "detect",
                how=err.how,
                site=err.site or getattr(exc, "site", ""),
                error=str(err)[:300],
                gen=pos.world.gen,
                step=pos.step,
            )
            answer = policy.on_failure(pos, err, workload)
            if answer == RAISE:
                # The job's objects are now only the training code's, as in a script
                # (the interpreter frees them as it exits, process groups included).
                RETIRED.clear()
                raise EndedByError(exc) from None
        else:
            world = pos.world
            ended = time.perf_counter()
            events.emit(
                "step_end",
                step=pos.step,
                step_s=ended - started,
                gen=world.gen,
                world_size=world.size,
                group_rank=world.group_rank,
                **fields,
            )
            answer = policy.after_step(
                Position(world=world, comm=pos.comm, step=pos.step, committed=pos.step), workload
            )
            between_s += time.perf_counter() - ended
        if isinstance(answer, int):
            return answer
        pos = answer
    policy.finish(pos)
    events.emit(
        "train_end",
        step=pos.committed,
        gen=pos.world.gen,
        world_size=pos.world.size,
        cpu_s=time.process_time(),
        between_s=between_s,
        **workload.checksum(),
        **device_memory(workload.device),
    )
    return 0


def build_workload(spec: RankSpec, events: EventWriter) -> Workload:
    """The point's workload on the rank's device, stamped for the phases of a rank that
    starts: ``cuda_ready`` (its CUDA context; CUDA only), ``workload_ready`` (model and
    optimizer built in host memory) and ``upload_end`` (both moved to the GPU, with the
    bytes; CUDA only), so that a restart's build and its upload are phases apart."""
    wl = spec.workload
    dev = device(spec, events)
    workload: Workload = load_path(spec.workload_impl)(wl.params, seed=spec.seed, world_size=wl.world_size, device=dev)
    events.emit("workload_ready")
    if dev.type != "cuda":
        workload.upload()  # host to host: nothing moves, nothing to stamp
        return workload
    start = time.perf_counter()
    nbytes = workload.upload()
    torch.cuda.synchronize(dev)
    events.emit("upload_end", bytes=nbytes, upload_s=time.perf_counter() - start)
    return workload


def device_memory(dev: torch.device) -> dict[str, int]:
    """The rank's peaks of GPU memory for ``train_end`` ({} off CUDA): what torch's
    caching allocator handed out, and what it reserved from the driver. Only the rank
    knows them (/proc sees host memory); the CUDA context's own memory is in neither."""
    if dev.type != "cuda":
        return {}
    return {
        "cuda_peak_bytes": torch.cuda.max_memory_allocated(dev),
        "cuda_reserved_peak_bytes": torch.cuda.max_memory_reserved(dev),
    }
