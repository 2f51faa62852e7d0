"""Preload module of the forkserver that starts ranks (``launch.start_method = "forkserver"``).

Importing torch costs 2-5 s per process on a small machine, and the first optimizer step
pulls in ``torch._dynamo`` (~2 s more). A rank forked from a process that paid both once
starts in tens of milliseconds, so trials measure recovery, not imports. Strategies that
restart processes through a real launcher (torchrun) still pay the import, and report it
as its own phase.

This module runs inside the forkserver, at its start: it ties the forkserver's life to
the harness (parent-death signal) and warms the imports. No thread pool is started
before forking (one intra-op thread, no work run in parallel), so the children are safe.
"""

from __future__ import annotations

from bench.procs.hygiene import set_pdeathsig

set_pdeathsig()

import torch  # noqa: E402
import torch.distributed  # noqa: E402
import torch.nn.parallel  # noqa: E402

torch.set_num_threads(1)


def _warm() -> None:
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.zeros(1, 2)).sum().backward()
    opt.step()


_warm()

import bench.rank.loop  # noqa: E402,F401  (rank-side code, so forks need no import)

try:  # the torchft strategy's replicas and lighthouse, when torchft is installed
    import torchft  # noqa: F401
except ImportError:
    pass
