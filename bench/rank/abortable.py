"""Collectives abortable through the store: reinit's layer, and torch-reconfigure's with
``notify = "abandon"``.

Why not call ``dist.all_reduce`` directly, as the stock strategies do? Two measured facts
(docs/facts.md):

- A survivor blocked in gloo on *another survivor* is not told that a third rank died;
  it waits for the process-group timeout. An in-process recovery therefore needs an
  out-of-band abort that reaches every rank at once.
- ``pg.abort()`` does not unblock a pending gloo collective.

So a collective is issued asynchronously and its caller waits on a future of ours.
That future completes when the collective does, or fails as soon as the abort key of
the current generation appears in the store (watched by a thread with its own store
connection, blocked in ``TCPStore.wait``: no polling). DDP's reducer waits on the same
futures through a communication hook that calls :meth:`AbortableCollectives.all_reduce_async`
(it *sums*: the workload scales its loss for that), so an abort also unblocks
``backward()``. This is ftbench's own design, recorded as the ``ftbench-collectives``
interposer.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from bench.rank.comm import ABORT_TAG, CollectiveError, Hook
from bench.rank.membership import GENERATION_OVER

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel


@dataclass(frozen=True, slots=True)
class Watch:
    """Where the abort key of a generation lives."""

    store: Any
    """A store client used by the watcher thread only (a blocking wait holds its socket)."""
    key: str
    timeout_s: float


class AbortableCollectives:
    """Collectives of one process-group generation, abortable through the store."""

    averages = False
    interposer = "ftbench-collectives"

    def __init__(
        self, *, group_rank: int, group_size: int, backend: str, watch: Watch | None = None, hooks: Sequence[Hook] = ()
    ) -> None:
        self.group_rank = group_rank
        self.group_size = group_size
        self.backend = backend
        self.hooks = list(hooks)
        self._lock = threading.Lock()
        self._pending: set[torch.futures.Future[torch.Tensor]] = set()
        self._aborted: str | None = None
        self._failed = False
        if watch is not None:
            threading.Thread(target=self._watch, args=(watch,), daemon=True, name="ftbench-abort-watch").start()

    @property
    def aborted(self) -> str | None:
        return self._aborted

    @property
    def failed(self) -> bool:
        """True once any collective of this generation failed or was aborted."""
        return self._failed

    def as_failure(self, exc: BaseException) -> CollectiveError | None:
        """The exception as a collective failure, or ``None`` if it is something else.

        DDP's reducer re-raises a failed hook future as a plain ``RuntimeError``; what
        tells it apart from a bug is that one of our collectives did fail.
        """
        if isinstance(exc, CollectiveError):
            return exc
        if isinstance(exc, RuntimeError) and self._failed:
            return CollectiveError(str(exc), site=getattr(exc, "site", ""))
        return None

    def all_reduce(self, tensor: torch.Tensor) -> None:
        """Sum ``tensor`` over the group in place; raise :class:`CollectiveError` on failure."""
        fut = self.all_reduce_async(tensor)
        try:
            fut.wait()
        except CollectiveError as err:
            err.site = err.site or "wait"
            raise
        except Exception as err:  # torch wraps the future's exception
            raise CollectiveError(str(err), site="wait") from err

    def attach_ddp(self, ddp: DistributedDataParallel) -> None:
        # A lambda: DDP checks a hook's annotations at run time, and this module's are strings.
        ddp.register_comm_hook(None, lambda _state, bucket: self.all_reduce_async(bucket.buffer()))

    def all_reduce_async(self, tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
        out = future_for(tensor)
        with self._lock:
            if self._aborted is not None:
                _fail(out, CollectiveError(self._aborted, "peer_abort"))
                return out
            self._pending.add(out)
        try:
            for hook in self.hooks:
                hook.before(tensor)
            work = dist.all_reduce(tensor, async_op=True)
        except Exception as err:  # an injected failure, or gloo refusing: a peer is gone
            self._finish(out, error=err)
            return out

        def done(f: torch.futures.Future[torch.Tensor]) -> None:
            try:
                f.value()
                for hook in self.hooks:
                    hook.after(tensor)
            except Exception as err:
                self._finish(out, error=err)
            else:
                self._finish(out, value=tensor)

        work.get_future().add_done_callback(done)
        return out

    def abort(self, reason: str) -> None:
        """Fail every pending and future collective of this generation."""
        with self._lock:
            self._failed = True
            if self._aborted is None:
                self._aborted = reason
            pending, self._pending = self._pending, set()
        for fut in pending:
            if not fut.done():
                _fail(fut, CollectiveError(reason, "peer_abort"))
        if self.backend == "nccl":
            # NCCL kernels keep the stream busy until the communicator is aborted (gloo
            # has no such call that works: docs/facts.md). Untested here: no GPU.
            abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
            if abort is not None:
                abort()

    def _finish(
        self, out: torch.futures.Future[torch.Tensor], *, value: Any = None, error: BaseException | None = None
    ) -> None:
        with self._lock:
            if out not in self._pending:
                return  # already failed by an abort
            self._pending.discard(out)
            self._failed = self._failed or error is not None
        if error is not None:
            _fail(out, CollectiveError(str(error)))
        else:
            out.set_result(value)

    def _watch(self, watch: Watch) -> None:
        try:
            watch.store.wait([watch.key], datetime.timedelta(seconds=watch.timeout_s))
            reason = watch.store.get(watch.key).decode(errors="replace")
        except Exception:
            return  # the watch timed out (trial deadline) or the store is gone
        if reason != GENERATION_OVER:
            self.abort(f"{ABORT_TAG}: {reason}")


def future_for(tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    """A future that may complete with ``tensor``: one made without devices refuses a
    CUDA result ("not among the expected device(s)"), so a GPU tensor's names its
    device (a CPU one must name none: torch wants device indices there)."""
    if tensor.device.type == "cuda":
        return torch.futures.Future(devices=[tensor.device])
    return torch.futures.Future()


def _fail(fut: torch.futures.Future[torch.Tensor], error: CollectiveError) -> None:
    # torch types set_exception's argument as the future's value type; it takes an exception.
    fut.set_exception(error)  # type: ignore[arg-type]
