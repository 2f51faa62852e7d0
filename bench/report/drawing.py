"""Drawing a report's figures side by side, in forked worker processes.

Rendering is most of a large report's time (a thousand loss curves, a timeline per
point), and one figure does not depend on another, so the figures of a report are
drawn as jobs: :meth:`Drawing.submit` queues a call, :meth:`Drawing.start` forks the
workers and hands them the jobs, the report's tables are built meanwhile, and
:meth:`Pending.result` waits for each figure (with a deadline).

The workers are forked after the runs are loaded, so each inherits the loaded data and
the queued calls from its parent's memory: a worker receives a job's index and sends
back what the drawing function returned (a path and a caption), nothing else crosses
the pipe, and nothing read from disk is unpickled. Each worker draws with its own Agg
canvas onto a file of its own; the PNG bytes are those the parent would have drawn.

Where fork is not the platform's way (or one CPU is all there is), the jobs run in the
parent, in the order submitted: the report is the same, only slower.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from multiprocessing.pool import AsyncResult, Pool
from typing import Any, Generic, TypeVar

from bench.procs.hygiene import set_pdeathsig

T = TypeVar("T")

#: How long a report waits for all of its figures. A 10,000-trial run draws in well
#: under a minute on two cores; a figure that takes this long is stuck, not slow.
DEADLINE_S = 1800.0
#: More workers than this gains nothing: a report has a dozen figures, one of them big.
MAX_WORKERS = 4

_JOBS: list[Callable[[], Any]] = []
"""The queued calls of the drawing being started; a forked worker inherits them."""


def _run_job(index: int) -> Any:
    return _JOBS[index]()


def default_workers() -> int:
    """The CPUs this process may use (its affinity, as in a container), at most
    :data:`MAX_WORKERS`; 1 where fork is not how the platform starts processes, or in a
    daemonic process (which may not have children)."""
    if sys.platform != "linux" or multiprocessing.current_process().daemon:
        return 1
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))


class DrawingError(RuntimeError):
    """A figure could not be drawn in time."""


class Pending(Generic[T]):
    """A queued figure: its drawing function's return value, once drawn."""

    def __init__(self, drawing: Drawing, index: int) -> None:
        self._drawing = drawing
        self._index = index

    def result(self) -> T:
        return self._drawing._result(self._index)  # type: ignore[no-any-return]


class Drawing:
    """Figures drawn by ``workers`` processes (1: in this process, when asked)."""

    def __init__(self, workers: int | None = None, deadline_s: float = DEADLINE_S) -> None:
        self.workers = default_workers() if workers is None else max(1, workers)
        self.deadline_s = deadline_s
        self._calls: list[Callable[[], Any]] = []
        self._done: dict[int, Any] = {}
        self._async: list[AsyncResult[Any]] = []
        self._pool: Pool | None = None
        self._deadline = 0.0

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Pending[T]:
        """Queue ``fn(*args, **kwargs)``; submit the biggest figures first (they start first)."""
        if self._pool is not None:
            raise RuntimeError("submit every figure before start()")
        self._calls.append(lambda: fn(*args, **kwargs))
        return Pending(self, len(self._calls) - 1)

    def start(self) -> None:
        """Fork the workers and hand them every job; with one worker (or one job) the
        jobs run when their results are first asked for."""
        self._deadline = time.monotonic() + self.deadline_s
        workers = min(self.workers, len(self._calls))
        if workers < 2:
            return
        global _JOBS
        _JOBS = self._calls
        try:
            # a worker dies with the report (SIGKILLed or not): no orphan draws on
            self._pool = multiprocessing.get_context("fork").Pool(workers, initializer=set_pdeathsig)
            self._async = [self._pool.apply_async(_run_job, (i,)) for i in range(len(self._calls))]
        finally:
            _JOBS = []  # the workers hold their copy; the parent keeps none

    def _result(self, index: int) -> Any:
        if index in self._done:
            return self._done[index]
        if self._pool is None:
            self._done[index] = self._calls[index]()
            return self._done[index]
        left = self._deadline - time.monotonic()
        try:
            self._done[index] = self._async[index].get(timeout=max(left, 0.0))
        except multiprocessing.TimeoutError:
            self.close()
            raise DrawingError(
                f"the report's figures were not drawn within {self.deadline_s:.0f} s: a figure is stuck, or the "
                "worker drawing it was killed (out of memory?)"
            ) from None
        return self._done[index]

    def close(self) -> None:
        """End the workers (they have finished every job unless something failed)."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def __enter__(self) -> Drawing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
