"""Moving training state: checkpoints on disk and transfers from a peer.

Strategies use them from their rank policies (restart loads a checkpoint, reinit and
its growth take state from a peer). Both record ``restore_start`` / ``restore_end``
with the bytes moved, so the restore phase and its size are figures whichever way the
state travels.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from bench.procs.events import EventWriter
from bench.rank.policy import World
from bench.rank.workload import Workload


def save_checkpoint(directory: str, workload: Workload, step: int, events: EventWriter) -> None:
    """Write the state every rank shares (rank 0 calls this); atomic by rename."""
    path = Path(directory) / "latest.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save({"step": step, "state": workload.state_dict()}, tmp)
    os.replace(tmp, path)
    events.emit("checkpoint", step=step, bytes=path.stat().st_size, save_s=time.perf_counter() - start)


def restore_checkpoint(directory: str, workload: Workload, events: EventWriter) -> int:
    """Load the last checkpoint, if any; returns the step it holds (0 without one)."""
    path = Path(directory) / "latest.pt"
    if not path.exists():
        return 0
    events.emit("restore_start", how="disk")
    saved = torch.load(path, weights_only=True)
    workload.load_state_dict(saved["state"])
    events.emit("restore_end", how="disk", bytes=path.stat().st_size, step=int(saved["step"]))
    return int(saved["step"])


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
