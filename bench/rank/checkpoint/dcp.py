"""``dcp`` and ``dcp-async``: ``torch.distributed.checkpoint``, every rank writing its part.

Each save is a folder ``dcp/step-SSSSSSS-gG`` (step and generation: an in-flight save of a
world that was abandoned never collides with its successor's). DCP's coordinator writes
``.metadata`` after gathering every rank's write results, so a folder with it is a
finished checkpoint, and restore takes the newest such folder; group rank 0 chooses it
and broadcasts the choice, so that every rank loads the same one even while an old save
is still landing. Older finished folders are removed once a newer one is finished.

The state is the workload's DCP form (:meth:`Workload.dcp_state_dict`), which DCP loads
in place. ``dcp`` saves on the training's own process group, between steps. ``dcp-async``
saves with ``async_save``: the loop waits for the staging copy only, and a thread runs
the plan, the writes and the metadata, whose collectives must not interleave with the
training's, so they run on a gloo group of its own, made with the workload's
process-group timeout: a dead peer fails them within it, and every wait for the
future has a deadline (:attr:`Checkpointer.deadline_s`).
"""

from __future__ import annotations

import datetime
import functools
import re
import shutil
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from bench.procs.events import EventWriter
from bench.rank.checkpoint.base import Checkpointer, Where, files_bytes
from bench.rank.workload import Workload

FOLDER = re.compile(r"step-(\d+)-g(\d+)")


class DCPSave(Checkpointer):
    design = "dcp"

    @property
    def root(self) -> Path:
        return self.where.directory / "dcp"

    def folder(self, step: int) -> Path:
        return self.root / f"step-{step:07d}-g{self.where.gen}"

    def finished(self) -> list[tuple[int, int, Path]]:
        """Finished checkpoints, oldest first: (step, gen, folder)."""
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            m = FOLDER.fullmatch(p.name)
            if m and (p / ".metadata").is_file():
                found.append((int(m.group(1)), int(m.group(2)), p))
        return sorted(found)

    def written(self, folder: Path) -> int:
        """What this rank wrote to ``folder``: its own ``__R_*.distcp`` files (the
        coordinator also the metadata)."""
        mine = list(folder.glob(f"__{self.where.group_rank}_*"))
        if self.where.group_rank == 0:
            mine.append(folder / ".metadata")
        return files_bytes(mine)

    def prune(self) -> None:
        """Group rank 0 removes finished checkpoints older than the newest."""
        if self.where.group_rank == 0:
            for _, _, old in self.finished()[:-1]:
                shutil.rmtree(old, ignore_errors=True)

    def save(self, step: int) -> None:
        start = time.perf_counter()
        folder = self.folder(step)
        dcp.save(self.workload.dcp_state_dict(), checkpoint_id=str(folder))
        self.saved(step, start, bytes=self.written(folder))
        self.prune()

    def restore(self) -> int:
        choice: list[Any] = [None]
        if self.where.group_rank == 0:
            newest = self.finished()[-1:]
            choice = [str(newest[0][2]) if newest else None]
        dist.broadcast_object_list(choice, src=0)  # group rank 0's choice, for every rank
        if choice[0] is None:
            return 0
        folder = Path(choice[0])
        m = FOLDER.fullmatch(folder.name)
        assert m is not None
        step = int(m.group(1))
        self.events.emit("restore_start", how="disk")
        state = self.workload.dcp_state_dict()
        dcp.load(state, checkpoint_id=str(folder))
        self.workload.load_dcp_state_dict(state)
        size = files_bytes(folder.iterdir())
        self.events.emit("restore_end", how="disk", bytes=size, step=step)
        return step


class DCPAsyncSave(DCPSave):
    design = "dcp-async"

    def __init__(self, where: Where, workload: Workload, events: EventWriter) -> None:
        super().__init__(where, workload, events)
        # A collective of every rank: all build their checkpointer at the same point.
        self.group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=where.timeout_s))
        self.pending: tuple[int, Future[Any], int] | None = None
        """(step, future, when the loop went on) of the save in flight."""
        self.done_at: dict[int, int] = {}
        """Monotonic stamp (ns) at which the future of a step completed."""

    def save(self, step: int) -> None:
        start = time.perf_counter()
        self.wait()  # the previous save must be finished before the next starts
        folder = self.folder(step)
        future = dcp.async_save(self.workload.dcp_state_dict(), checkpoint_id=str(folder), process_group=self.group)
        assert isinstance(future, Future)  # a thread's future: no async stager was given
        future.add_done_callback(functools.partial(self.stamp, step))
        self.saved(step, start)
        self.pending = (step, future, time.monotonic_ns())

    def stamp(self, step: int, _future: Future[Any]) -> None:
        """In the saving thread, the moment the save finished."""
        self.done_at.setdefault(step, time.monotonic_ns())

    def poll(self) -> None:
        if self.pending is not None and self.pending[1].done():
            self.wait()

    def finish(self) -> None:
        self.wait()

    def wait(self) -> None:
        """Wait for the save in flight (within the deadline) and record it."""
        if self.pending is None:
            return
        step, future, went_on = self.pending
        try:
            future.result(timeout=self.deadline_s)
        except FutureTimeout:
            raise self.timed_out(step) from None
        self.pending = None
        done = self.done_at.get(step, time.monotonic_ns())
        self.background_done(step, went_on, done, self.written(self.folder(step)))
        self.prune()
