"""Moving training state from a peer.

reinit and its growth take state from a peer through the process group; checkpoints,
on disk or replicated, are :mod:`bench.rank.checkpoint`. Both record ``restore_start`` /
``restore_end`` with the bytes moved, so the restore phase and its size are figures
whichever way the state travels.
"""

from __future__ import annotations

import io

import torch
import torch.distributed as dist

from bench.procs.events import EventWriter
from bench.rank.policy import World
from bench.rank.workload import Workload


def restore_from_peer(workload: Workload, world: World, source: int, events: EventWriter) -> None:
    """The member at group rank ``source`` broadcasts its full state to the others."""
    events.emit("restore_start", source=world.members[source], how="peer")
    if world.group_rank == source:
        buf = io.BytesIO()
        torch.save(workload.state_dict(), buf)
        payload = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        size = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        size = torch.zeros(1, dtype=torch.int64)
    dist.broadcast(size, src=source)
    if world.group_rank != source:
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.broadcast(payload, src=source)
    if world.group_rank != source:
        workload.load_state_dict(torch.load(io.BytesIO(payload.numpy().tobytes()), weights_only=True))
    events.emit("restore_end", source=world.members[source], bytes=int(size.item()), how="peer")
