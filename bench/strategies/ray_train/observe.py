"""Ray Train's controller, observed through its own callback hooks.

:class:`RayObserver` is handed to ``RunConfig(callbacks=[...])`` like any callback a
user writes against Ray Train's ``ControllerCallback`` / ``WorkerGroupCallback`` /
``WorkerCallback`` interfaces (Ray's DeveloperAPI). Ray calls its hooks from the
controller's own control loop, at the moments the controller acts; each hook writes one
event (``src = controller``) and returns, and nothing Ray decides passes through it:

- ``detect`` (how ``ray_worker_dead`` or ``ray_worker_error``): the first poll of a
  worker group that reports failed workers, with Ray's own verdict: ``ranks`` (every
  failed worker) and ``dead`` (the workers whose actor or node was lost, or whose poll
  hung past the health-check timeout: the culprits Ray names);
- ``restart_decision``: the failure policy's decision (``RETRY``, ``RAISE``) on failed
  workers; ``start_retry_decision``: its decision on a new group that did not start (its
  placement group was not ready within the start timeout);
- ``worker_group_stop`` / ``worker_group_down``: the old group's shutdown;
- ``worker_group_start`` / ``worker_group_up``: a new group's start (its placement group,
  its actors and ``TorchConfig``'s process group) and its end;
- ``training_start``: the training function launched on the new group;
- ``ray_state``: each change of the controller's state (``RunningState`` ->
  ``RestartingState`` ...), and ``observer_cost`` at the end: how many hooks ran and the
  time spent in them, the interposer's whole cost to the controller.

The same object, copied to each worker with the callbacks Ray propagates, tells the
training function which worker group it belongs to (``FTBENCH_RAY_GEN``): the count of
groups the controller had started when it copied it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ray.train.v2._internal.exceptions import (
    WorkerHealthCheckFailedError,
    WorkerHealthCheckTimeoutError,
)
from ray.train.v2._internal.execution.callback import ControllerCallback, WorkerCallback, WorkerGroupCallback

from bench.procs.events import EventWriter

GEN_ENV = "FTBENCH_RAY_GEN"
"""Set in each worker before its training function runs: its worker group's number."""


class RayObserver(ControllerCallback, WorkerGroupCallback, WorkerCallback):
    def __init__(self, events_dir: str) -> None:
        self.events_dir = events_dir
        self.gen = -1
        """The number of the worker group started last (0 for the first)."""
        self._writer: EventWriter | None = None
        self._reported: set[int] = set()
        """Groups whose failure is already recorded (the controller polls again)."""
        self._state = ""
        self._hooks = 0
        self._spent_s = 0.0

    def __getstate__(self) -> dict[str, Any]:
        """What Ray copies to the controller and the workers: no open file."""
        state = dict(self.__dict__)
        state["_writer"] = None
        return state

    # -- recording ---------------------------------------------------------------
    def _emit(self, event: str, **fields: Any) -> None:
        if self._writer is None or self._writer.base.get("pid") != os.getpid():
            pid = os.getpid()
            self._writer = EventWriter(Path(self.events_dir) / f"controller-{pid}.jsonl", src="controller", pid=pid)
            self._writer.emit("proc_start", role="ray_controller")
        self._writer.emit(event, **fields)

    @contextmanager
    def _hook(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self._hooks += 1
            self._spent_s += time.perf_counter() - start

    # -- ControllerCallback -----------------------------------------------------------
    def after_controller_state_update(self, previous_state: Any, current_state: Any) -> None:
        with self._hook():
            name = type(current_state).__name__
            if name != self._state:
                self._emit("ray_state", previous=type(previous_state).__name__, state=name)
                self._state = name

    def before_controller_execute_failure_decision(self, failure_decision: Any) -> None:
        with self._hook():
            # A failure of running workers, or of a group's start (its placement group not
            # ready within the start timeout: resources of a lost node): two boundaries.
            event = "start_retry_decision" if self._state == "SchedulingState" else "restart_decision"
            decision = getattr(failure_decision, "name", str(failure_decision))
            self._emit(event, decision=decision, gen=self.gen, state=self._state)

    def after_controller_finish(self, result: Any) -> None:
        with self._hook():
            error = getattr(result, "error", None)
            self._emit("controller_end", error=str(error)[:300] if error else "")
        self._emit("observer_cost", hooks=self._hooks, spent_s=self._spent_s)

    # -- WorkerGroupCallback ------------------------------------------------------------
    def before_worker_group_start(self, worker_group_context: Any) -> None:
        with self._hook():
            self.gen += 1
            self._emit("worker_group_start", gen=self.gen, num_workers=int(worker_group_context.num_workers))

    def after_worker_group_start(self, worker_group: Any) -> None:
        with self._hook():
            workers = {
                str(w.distributed_context.world_rank): {"node_ip": w.metadata.node_ip, "pid": w.metadata.pid}
                for w in worker_group.get_workers()
            }
            self._emit("worker_group_up", gen=self.gen, world_size=len(workers), workers=workers)

    def after_worker_group_training_start(self, worker_group: Any) -> None:
        with self._hook():
            self._emit("training_start", gen=self.gen)

    def after_worker_group_poll_status(self, worker_group_status: Any) -> None:
        with self._hook():
            errors: dict[int, BaseException] = worker_group_status.errors
            if not errors or self.gen in self._reported:
                return
            self._reported.add(self.gen)
            dead = sorted(
                r
                for r, e in errors.items()
                if isinstance(e, (WorkerHealthCheckFailedError, WorkerHealthCheckTimeoutError))
            )
            self._emit(
                "detect",
                how="ray_worker_dead" if dead else "ray_worker_error",
                gen=self.gen,
                ranks=sorted(errors),
                dead=dead,
                error={str(r): f"{type(e).__name__}: {e}"[:200] for r, e in sorted(errors.items())},
            )

    def before_worker_group_shutdown(self, worker_group: Any) -> None:
        with self._hook():
            self._emit("worker_group_stop", gen=self.gen)

    def after_worker_group_shutdown(self, worker_group_context: Any) -> None:
        with self._hook():
            self._emit("worker_group_down", gen=self.gen)

    def after_worker_group_abort(self, worker_group_context: Any) -> None:
        with self._hook():
            self._emit("worker_group_abort", gen=self.gen)

    # -- WorkerCallback (runs in each worker) ----------------------------------------------
    def after_init_train_context(self) -> None:
        os.environ[GEN_ENV] = str(self.gen)
