"""``torch-save``: group rank 0 writes the whole state with ``torch.save``; the loop waits.

One file, ``latest.pt``, replaced atomically by rename, so a kill in the middle of a save
leaves the previous checkpoint whole. Every rank of a new world reads it.
"""

from __future__ import annotations

import os
import time

import torch

from bench.rank.checkpoint.base import Checkpointer


class TorchSave(Checkpointer):
    design = "torch-save"

    def save(self, step: int) -> None:
        if self.where.group_rank != 0:
            return  # every replica holds the same state: one writer is enough
        path = self.where.directory / "latest.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save({"step": step, "state": self.workload.state_dict()}, tmp)
        os.replace(tmp, path)
        self.saved(step, start, bytes=path.stat().st_size)

    def restore(self) -> int:
        path = self.where.directory / "latest.pt"
        if not path.exists():
            return 0
        self.events.emit("restore_start", how="disk")
        saved = torch.load(path, weights_only=True)
        self.workload.load_state_dict(saved["state"])
        step = int(saved["step"])
        self.events.emit("restore_end", how="disk", bytes=path.stat().st_size, step=step)
        return step
