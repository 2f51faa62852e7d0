"""Forkserver preload for workloads that train: one optimizer step, run once.

An optimizer's first step imports ``torch._dynamo`` (about 2 s per process, 5 s with four
processes on two cores); a rank forked after it has paid that already. ``forkserver``
ranks always have it; ``forkserver-private`` ranks only for workloads whose ranks run an
optimizer (``rank_preload`` of their plugin): a rank of a collectives-only loop never
imports dynamo, and a private rank forked from here would own memory that a fresh one
of that loop does not.
"""

from __future__ import annotations

import torch


def _warm() -> None:
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.zeros(1, 2)).sum().backward()
    opt.step()


_warm()
