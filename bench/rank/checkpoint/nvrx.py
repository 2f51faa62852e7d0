"""NVRx's checkpointing (``nvidia_resiliency_ext.checkpointing``), used as its docs show.

``nvrx-local``: NVRx's ``LocalCheckpointManager``. Every rank saves its own state as a
local checkpoint (``local/ftbench/<group rank>/iter_<step>_<rank>_local.pt``), and NVRx's
``CliqueReplicationStrategy`` sends it to the other rank of its clique (pairs of
neighbouring ranks: ``replication_jump = 1``, ``replication_factor = 2``), which keeps the
copy in its own local directory: redundancy on a peer instead of a shared disk. A
restore asks NVRx for the newest iteration every rank can get (``find_latest``) and loads
it (``load``): from the rank's own directory, or from the peer holding the replica.
The save is NVRx's synchronous one (``is_async=False``: its asynchronous mode calls
``torch.cuda.synchronize()``); the replication groups are made with the workload's
process-group timeout, so a dead peer fails a replication within it.

``nvrx-async``: NVRx's asynchronous writer, ``TorchAsyncCheckpoint``: group rank 0 hands
the state to NVRx's persistent writer process and goes on; the file becomes
``latest.pt`` by rename once NVRx reports it finished. It needs CUDA
(:data:`bench.rank.checkpoint.NEEDS_CUDA`), so it never runs on gloo.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

import torch
import torch.distributed as dist
from nvidia_resiliency_ext.checkpointing.local.basic_state_dict import (
    BasicTensorAwareStateDict,
    dict_list_map_inplace,
)

from bench.procs.events import EventWriter
from bench.rank.checkpoint import REPLICATION_FACTOR
from bench.rank.checkpoint.base import Checkpointer, Where, files_bytes
from bench.rank.checkpoint.torchsave import TorchSave
from bench.rank.workload import Workload

SESSION = "ftbench"


class HostStateDict(BasicTensorAwareStateDict):  # type: ignore[misc]  # NVRx ships no types
    """NVRx's basic tensor-aware state dict for a workload on any device.

    NVRx's own class asserts that every tensor is on CUDA; its ``TensorAwareStateDict``
    contract is what users implement for other layouts, and this one only returns tensors
    to the workload's device instead of ``cuda``. The tensors are copies: replication
    hollows the dict it is given, and the optimizer's per-parameter state would be
    hollowed with it."""

    def __init__(self, state_dict: dict[str, Any], device: str) -> None:
        self.state_dict = dict_list_map_inplace(
            lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x, _plain(state_dict)
        )
        self.device = device
        self._is_hollow = False

    def restore_tensor_device(self, non_blocking: bool = True) -> None:
        assert not self.is_hollow
        dict_list_map_inplace(
            lambda x: x.to(self.device, non_blocking=non_blocking) if isinstance(x, torch.Tensor) else x,
            self.state_dict,
        )


def _plain(x: Any) -> Any:
    """Dicts and lists rebuilt (NVRx maps only plain dicts and lists in place)."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


class NVRxLocal(Checkpointer):
    design = "nvrx-local"

    def __init__(self, where: Where, workload: Workload, events: EventWriter) -> None:
        super().__init__(where, workload, events)
        from nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager import LocalCheckpointManager
        from nvidia_resiliency_ext.checkpointing.local.replication.group_utils import (
            GroupWrapper,
            parse_group_sequence,
        )
        from nvidia_resiliency_ext.checkpointing.local.replication.strategies import CliqueReplicationStrategy

        # NVRx's CliqueReplicationStrategy.from_replication_params, with a timeout on its groups.
        timeout = datetime.timedelta(seconds=where.timeout_s)
        cliques = parse_group_sequence(
            replication_jump=1, replication_factor=REPLICATION_FACTOR, world_size=where.group_size
        )
        groups = [dist.new_group(ranks, timeout=timeout) for ranks in cliques]
        strategy = CliqueReplicationStrategy(GroupWrapper.from_list_of_groups(groups), target_device="cpu")
        self.manager = LocalCheckpointManager(where.directory / "local", session_id=SESSION, repl_strategy=strategy)

    def save(self, step: int) -> None:
        start = time.perf_counter()
        state = HostStateDict(self.workload.state_dict(), str(self.workload.device))
        self.manager.save(state, step, is_async=False)
        mine = self.manager.local_ckpt_dir.glob(f"iter_{step:07d}_*_local.pt")  # its own and the replica
        self.saved(step, start, bytes=files_bytes(mine))

    def restore(self) -> int:
        step = int(self.manager.find_latest())
        if step < 0:
            return 0
        me = dist.get_rank()
        own = (step, me, SESSION) in set(map(tuple, self.manager.globally_available_ids[me]))
        how = "local" if own else "peer"
        self.events.emit("restore_start", how=how)
        state, _ = self.manager.load()
        size = sum(t.nbytes for t in state.tensors)
        self.workload.load_state_dict(state.state_dict)
        self.events.emit("restore_end", how=how, bytes=size, step=step)
        return step


class NVRxAsync(TorchSave):
    """Restores as ``torch-save`` does: the same ``latest.pt``, made whole by rename."""

    design = "nvrx-async"

    def __init__(self, where: Where, workload: Workload, events: EventWriter) -> None:
        super().__init__(where, workload, events)
        from nvidia_resiliency_ext.checkpointing.async_ckpt.torch_ckpt import TorchAsyncCheckpoint

        self.writer = TorchAsyncCheckpoint(persistent_queue=True) if where.group_rank == 0 else None
        self.pending: tuple[int, str, int] | None = None
        """(step, file being written, when the loop went on) of the save in flight."""

    @property
    def path(self) -> str:
        return str(self.where.directory / "latest.pt")  # TorchSave.restore reads it

    def save(self, step: int) -> None:
        if self.writer is None:
            return
        start = time.perf_counter()
        self.wait(blocking=True)
        os.makedirs(self.where.directory, exist_ok=True)
        tmp = f"{self.path}.step{step}"
        self.writer.async_save({"step": step, "state": self.workload.state_dict()}, tmp)
        self.saved(step, start)
        self.pending = (step, tmp, time.monotonic_ns())

    def poll(self) -> None:
        self.wait(blocking=False)

    def finish(self) -> None:
        self.wait(blocking=True)
        caller = self.writer._async_calls_queue.persistent_caller if self.writer is not None else None
        if caller is not None and caller.process is not None:
            # NVRx's close(), with a bound on the join: its worker leaves on "DONE".
            caller.queue.put("DONE")
            caller.process.join(timeout=self.deadline_s)
            caller.process = None

    def wait(self, *, blocking: bool) -> None:
        """NVRx's non-blocking finalize, polled (its blocking one waits without a bound)."""
        if self.writer is None or self.pending is None:
            return
        step, tmp, went_on = self.pending
        queue = self.writer._async_calls_queue  # NVRx's count of unfinished saves
        end = time.monotonic() + self.deadline_s
        while True:
            self.writer.finalize_async_save(blocking=False, no_dist=True)
            if queue.get_num_unfinalized_calls() == 0:
                break
            if not blocking:
                return
            if time.monotonic() > end:
                raise self.timed_out(step)
            time.sleep(0.01)
        done = time.monotonic_ns()
        os.replace(tmp, self.path)
        self.pending = None
        self.background_done(step, went_on, done, os.path.getsize(self.path))
