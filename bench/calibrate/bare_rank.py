"""A bare torch.distributed rank: the reference ftbench calibrates against.

It imports nothing of ftbench (only the standard library and torch), so what it measures
is plain PyTorch. It trains the same thing ftbench's workloads do (a 1 MiB all_reduce
loop, or the same MLP under plain DistributedDataParallel with its built-in reducer),
the way a user writes it: blocking collectives, ``loss.backward()``, ``opt.step()``.

It writes four JSON lines to OUT and nothing else: ``started`` after its first step (the
harness counts time in training from it), ``ready`` once warmed up (with the median
step time, so the harness can aim an injection at a random moment of a step),
``raised`` at the moment a collective raises (``time.monotonic_ns()`` in the except
clause, the first thing it does; then it ends at once with ``os._exit``), and ``done``
with its step times and the CPU time its steps took (``cpu_s``, every thread of the
process) if training ends.

    python bare_rank.py --out OUT --store HOST:PORT --rank R --world-size N \
        --workload ddp|allreduce --steps S --warmup W --timeout-s T [--backend gloo]

``ValueError`` (a wrong result) is not a collective failure: it is not caught.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def _line(out: str, **fields: object) -> None:
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(fields) + "\n").encode())
    finally:
        os.close(fd)


def _allreduce(rank: int, size: int, nbytes: int):  # type: ignore[no-untyped-def]
    buf = torch.empty(max(1, nbytes // 4), dtype=torch.float32)
    expected = size * (size + 1) / 2

    def step(_i: int) -> None:
        buf.fill_(float(rank + 1))
        dist.all_reduce(buf)
        low, high = torch.aminmax(buf)  # every result checked, as ftbench's workload does
        if not low.item() == high.item() == expected:
            raise ValueError("all_reduce result is wrong")

    return step


def _ddp(rank: int, size: int, seed: int, batch_per_rank: int):  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / max(1, p.shape[-1])) ** 0.5)
    teacher = torch.randn(64, 1, generator=gen)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)

    def step(i: int) -> None:
        # The same batch, loss and update as ftbench's ddp workload computes.
        g = torch.Generator().manual_seed(seed * 1_000_003 + i)
        x = torch.randn(size * batch_per_rank, 64, generator=g)
        y = x @ teacher + 0.1 * torch.randn(size * batch_per_rank, 1, generator=g)
        lo, hi = rank * batch_per_rank, (rank + 1) * batch_per_rank
        opt.zero_grad(set_to_none=False)
        loss = ((ddp(x[lo:hi]) - y[lo:hi]) ** 2).sum() / (size * batch_per_rank)
        (loss * size).backward()
        opt.step()
        loss.item()

    return step


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--workload", choices=("ddp", "allreduce"), required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--timeout-s", type=float, required=True)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--bytes", type=int, default=1 << 20)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)  # as ftbench's ranks: four processes share two cores
    host, port = a.store.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), None, False, timeout=datetime.timedelta(seconds=120))
    # Every rank has imported torch before any starts the group: gloo's rendezvous waits
    # only the process-group timeout for its peers, and importing a CUDA build of torch on
    # a loaded machine can take longer than that (harness scaffolding, not measured).
    store.add("imported", 1)
    deadline = time.monotonic() + 120
    while store.add("imported", 0) < a.world_size and time.monotonic() < deadline:
        time.sleep(0.005)
    dist.init_process_group(
        a.backend, store=store, rank=a.rank, world_size=a.world_size, timeout=datetime.timedelta(seconds=a.timeout_s)
    )
    step = (
        _allreduce(a.rank, a.world_size, a.bytes)
        if a.workload == "allreduce"
        else _ddp(a.rank, a.world_size, a.seed, 32)
    )
    times: list[float] = []
    cpu = time.process_time()  # as ftbench's ranks stamp train_start and train_end
    for i in range(1, a.steps + 1):
        start = time.perf_counter()
        try:
            step(i)
        except RuntimeError as err:  # what torch.distributed raises (DistError included)
            t = time.monotonic_ns()
            _line(a.out, event="raised", t=t, rank=a.rank, step=i, error=str(err)[:300])
            os._exit(1)  # at once, as ftbench's fail-stop rank ends by default (exit = "immediate")
        times.append(time.perf_counter() - start)
        if i == 1:
            _line(a.out, event="started", t=time.monotonic_ns(), rank=a.rank)
        if i == a.warmup:
            _line(a.out, event="ready", t=time.monotonic_ns(), rank=a.rank, step_s=statistics.median(times[5:]))
    _line(a.out, event="done", t=time.monotonic_ns(), rank=a.rank, step_s=times, cpu_s=time.process_time() - cpu)
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
