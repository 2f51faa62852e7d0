"""Preload of the forkserver that starts the scale benchmark's processes: the stacks'
client and server modules, imported once, so that a coordinator or a process of
participants forked for each point starts in milliseconds rather than seconds.

Nothing here starts a thread (the children are forked from it). A stack that is not
installed is left out; its coordinator is skipped with the reason where it is asked for.
"""

from __future__ import annotations

import contextlib
import warnings

import torch.distributed
import torch.distributed.elastic.rendezvous.c10d_rendezvous_backend
import torch.distributed.elastic.rendezvous.dynamic_rendezvous  # noqa: F401

import bench.rank.membership
import bench.scale.participants
import bench.scale.probes
import bench.scale.servers
import bench.scale.worker  # noqa: F401

with contextlib.suppress(ImportError):
    import torchft._torchft  # noqa: F401
with warnings.catch_warnings(), contextlib.suppress(ImportError):
    warnings.simplefilter("ignore")  # NVRx imports pynvml, which warns that it is deprecated
    import nvidia_resiliency_ext.inprocess.rank_assignment
    import nvidia_resiliency_ext.inprocess.store  # noqa: F401
