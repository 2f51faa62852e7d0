"""Preload module of the forkserver that starts ranks (``launch.start_method`` ``forkserver``
or ``forkserver-private``).

Importing torch costs 2-5 s per process on a small machine. A rank forked from a process
that paid it once starts in tens of milliseconds, so trials measure recovery, not
imports. Strategies that restart processes through a real launcher (torchrun) still pay
the import, and report it as its own phase.

This module runs inside the forkserver, at its start: it ties the forkserver's life to
the harness (parent-death signal) and imports what every rank imports, nothing more;
what only some ranks import (an optimizer's step, torchft) comes from the other modules
of the preload (:func:`bench.jobs.job.zygote_preload`: all of them for ``forkserver``
ranks, what the point's ranks import for ``forkserver-private`` ones).
No thread pool is started before forking (one intra-op thread), so the children are safe.
"""

from __future__ import annotations

from bench.procs.hygiene import set_pdeathsig

set_pdeathsig()

import torch  # noqa: E402
import torch.distributed  # noqa: E402
import torch.nn.parallel  # noqa: E402

torch.set_num_threads(1)

import bench.rank.loop  # noqa: E402,F401  (rank-side code, so forks need no import)
