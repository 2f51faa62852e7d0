"""Plain DistributedDataParallel training, written the way a user writes a torchrun script.

It imports nothing of ftbench: it is the job ftbench puts under test as a black box
(``ftbench run --job -- torchrun ... examples/ddp/train.py``), and the independent
reference of ``ftbench calibrate --case kill-ddp-user``. It trains what ftbench's
``ddp`` workload trains (the same MLP and initial weights from ``--seed``, the global
batch drawn from a per-step seed and split among the ranks, SGD with momentum 0.9), so
that the two can be compared figure for figure.

    torchrun --nproc-per-node 4 examples/ddp/train.py --steps 300 --ckpt-dir /tmp/ckpt

The world comes from the launcher's environment (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``). With ``--ckpt-dir`` rank 0 saves the model and the
optimizer with ``torch.save`` every ``--ckpt-every`` steps, and every rank resumes
from the newest checkpoint it finds there, as a restarted job does.
``--failure-log PATH`` appends one JSON line when a step fails (the step, the error and
``time.monotonic_ns()``, taken first thing in the ``except`` clause). The error then
ends the process: printed, and the interpreter's own exit, or with ``--hard-exit`` at
once (``os._exit(1)``, nothing printed), as jobs do that must not hang in a process
group's teardown. At the end rank 0 prints how long its steps took after
``--warmup-steps`` (``timing: N steps W s wall C s cpu``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def build_model(seed: int, in_features: int, hidden: int) -> tuple[torch.nn.Module, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(in_features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / p.shape[-1]) ** 0.5)
    teacher = torch.randn(in_features, 1, generator=gen)
    return model, teacher


def global_batch(seed: int, step: int, size: int, in_features: int, teacher: torch.Tensor):
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    x = torch.randn(size, in_features, generator=gen)
    y = x @ teacher + 0.1 * torch.randn(size, 1, generator=gen)
    return x, y


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    found = sorted(ckpt_dir.glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    return found[-1] if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-per-rank", type=int, default=32)
    parser.add_argument("--in-features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pg-timeout-s", type=float, default=1800.0)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--ckpt-dir", type=Path)
    parser.add_argument("--ckpt-every", type=int, default=50)
    parser.add_argument("--failure-log", type=Path)
    parser.add_argument("--hard-exit", action="store_true")
    parser.add_argument("--warmup-steps", type=int, default=20)
    args = parser.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    model, teacher = build_model(args.seed, args.in_features, args.hidden)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    start = 1
    if args.ckpt_dir is not None:
        args.ckpt_dir.mkdir(parents=True, exist_ok=True)
        ckpt = latest_checkpoint(args.ckpt_dir)
        if ckpt is not None:
            state = torch.load(ckpt, weights_only=True)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
            start = state["step"] + 1
            if rank == 0:
                print(f"resumed from {ckpt.name} at step {start}", flush=True)

    batch = world * args.batch_per_rank
    lo, hi = rank * args.batch_per_rank, (rank + 1) * args.batch_per_rank
    timed_from: tuple[int, float, float] | None = None
    for step in range(start, args.steps + 1):
        try:
            x, y = global_batch(args.seed, step, batch, args.in_features, teacher)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x[lo:hi]), y[lo:hi])
            loss.backward()
            opt.step()
            loss_value = loss.item()
        except Exception as err:
            if args.failure_log is not None:
                t = time.monotonic_ns()
                line = json.dumps({"rank": rank, "step": step, "t": t, "error": str(err)[:300]})
                with open(args.failure_log, "a") as fh:
                    fh.write(line + "\n")
            if args.hard_exit:
                os._exit(1)
            raise
        if rank == 0 and (step % args.log_every == 0 or step == args.steps):
            print(f"step {step} loss {loss_value:.6f}", flush=True)
        if step == start + args.warmup_steps - 1:
            timed_from = (step, time.perf_counter(), time.process_time())
        if args.ckpt_dir is not None and rank == 0 and step % args.ckpt_every == 0:
            tmp = args.ckpt_dir / f".step-{step}.pt.tmp"
            torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step}, tmp)
            tmp.rename(args.ckpt_dir / f"step-{step}.pt")
    if rank == 0 and timed_from is not None:
        first, wall, cpu = timed_from
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"timing: {args.steps - first} steps {wall:.6f} s wall {cpu:.6f} s cpu", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
