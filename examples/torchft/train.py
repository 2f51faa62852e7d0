"""Fault-tolerant DDP with torchft, written the way torchft's ``train_ddp.py`` is.

It imports nothing of ftbench. One replica group per ``torchrun``; the groups find each
other through a lighthouse started beside them, and each group is told its id and the
number of groups by the environment (``REPLICA_GROUP_ID``, ``NUM_REPLICA_GROUPS``,
``TORCHFT_LIGHTHOUSE``), as in torchft's example:

    torchft_lighthouse --min_replicas 1 --quorum_tick_ms 100 --join_timeout_ms 10000 --bind 127.0.0.1:29510 &
    export TORCHFT_LIGHTHOUSE=http://127.0.0.1:29510 NUM_REPLICA_GROUPS=2
    REPLICA_GROUP_ID=0 torchrun --nproc-per-node 1 --master-port 29601 --max-restarts 3 examples/torchft/train.py &
    REPLICA_GROUP_ID=1 torchrun --nproc-per-node 1 --master-port 29602 --max-restarts 3 examples/torchft/train.py

The model is a small MLP regressing a random linear teacher (initial weights from
``--seed``, the same in every group), the data a synthetic dataset sharded across the
replica groups by torchft's ``DistributedSampler``. torchft's Manager runs the quorum
each step; its ``DistributedDataParallel`` averages gradients across the live groups
over a ``ProcessGroupGloo`` with an explicit timeout, and its optimizer wrapper steps
only when the step may commit. A replica group that restarts heals from a live one
(the model and optimizer state through the Manager's ``state_dict``), so no checkpoint
is needed while one group lives. Progress: ``[step] loss = X`` every ``--log-every``
steps, and the Manager's own log lines (``logging`` at INFO).
"""

from __future__ import annotations

import argparse
import logging
import os
from datetime import timedelta

import torch
from torch import nn, optim
from torch.distributed.elastic.multiprocessing.errors import record
from torch.utils.data import DataLoader, TensorDataset
from torchft import DistributedDataParallel, DistributedSampler, Manager, Optimizer, ProcessGroupGloo

logging.basicConfig(level=logging.INFO)


def synthetic_data(seed: int, samples: int, in_features: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    teacher = torch.randn(in_features, 1, generator=gen)
    x = torch.randn(samples, in_features, generator=gen)
    y = x @ teacher + 0.1 * torch.randn(samples, 1, generator=gen)
    return TensorDataset(x, y)


@record
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--in-features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pg-timeout-s", type=float, default=5.0, help="ProcessGroupGloo's timeout")
    parser.add_argument("--manager-timeout-s", type=float, default=30.0)
    parser.add_argument("--min-replica-size", type=int, default=1)
    parser.add_argument("--log-every", type=int, default=1)
    args = parser.parse_args()

    replica_group_id = int(os.environ.get("REPLICA_GROUP_ID", 0))
    num_replica_groups = int(os.environ.get("NUM_REPLICA_GROUPS", 2))
    torch.manual_seed(args.seed)

    trainset = synthetic_data(args.seed, args.samples, args.in_features)
    sampler = DistributedSampler(
        trainset,
        replica_rank=replica_group_id,
        num_replica_groups=num_replica_groups,
        group_rank=0,
        num_replicas=1,
        shuffle=True,
    )
    trainloader = DataLoader(trainset, batch_size=args.batch_size, sampler=sampler)

    def load_state_dict(state_dict: dict) -> None:
        m.load_state_dict(state_dict["model"])
        optimizer.load_state_dict(state_dict["optim"])

    def state_dict() -> dict:
        return {"model": m.state_dict(), "optim": optimizer.state_dict()}

    pg = ProcessGroupGloo(timeout=timedelta(seconds=args.pg_timeout_s))
    manager = Manager(
        pg=pg,
        min_replica_size=args.min_replica_size,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"train_ddp_{replica_group_id}",
        timeout=timedelta(seconds=args.manager_timeout_s),
    )

    m = nn.Sequential(nn.Linear(args.in_features, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 1))
    m = DistributedDataParallel(manager, m)
    optimizer = Optimizer(manager, optim.AdamW(m.parameters(), lr=args.lr))
    criterion = nn.MSELoss()

    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for inputs, labels in trainloader:
            # must be called at the beginning of each train loop: the quorum starts here
            optimizer.zero_grad()
            loss = criterion(m(inputs), labels)
            # the gradients' allreduce across replica groups overlaps with backward
            loss.backward()
            # steps only if the step may commit (no error in this step's allreduce)
            optimizer.step()

            if manager.current_step() % args.log_every == 0:
                print(f"[{manager.current_step()}] loss = {loss.item()}", flush=True)
            if manager.current_step() >= args.steps:
                return
        epoch += 1


if __name__ == "__main__":
    main()
