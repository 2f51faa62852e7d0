"""The training loop of a torchft replica, shared by its two forms: a replica group of
one rank over the ddp workload (``replica.py``) and a sharded group under hsdp
(``sharded.py``). They differ only in how a step is computed (:class:`Compute`).

One iteration per quorum, as TorchFT's own examples run it: ``zero_grad`` starts the
step's quorum, the step is computed, and the wrapped optimizer's ``step`` asks
``should_commit``; a committed step is a ``step_end``, a discarded one a ``discard``
(with the first error, stamped when the Manager was told of it, as the ``detect``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from bench.procs.events import EventWriter
from bench.rank.comm import classify
from bench.rank.entry import EXIT_FAILED, RankSpec
from bench.rank.loop import device_memory
from bench.strategies.torchft.observe import first_line, pg_handle


class GroupLost(Exception):
    """A collective among the ranks of this replica group failed: the group is lost as a
    whole (torchrun's agent would restart it), the other groups go on."""


class Compute(Protocol):
    def __call__(self, step: int, replica: int | None, n: int) -> tuple[Callable[[], float], dict[str, Any]]:
        """Forward and backward of ``step`` for replica rank ``replica`` (None: healing)
        of ``n`` participating groups. Returns the step's loss share, read once the step
        is committed, and this rank's extra ``step_end`` fields; raises
        :class:`GroupLost`."""
        ...


def train(
    spec: RankSpec,
    events: EventWriter,
    manager: Any,
    optimizer: Any,
    workload: Any,
    compute: Compute,
    *,
    group_size: int = 1,
    on_commit: Callable[[], None] = lambda: None,
) -> int:
    """Train until ``workload.steps`` steps are committed; returns the exit code. World
    sizes in the events count ranks (participating groups x ``group_size``)."""
    steps = spec.workload.steps
    gen = -1
    failing = False
    first = True
    events.emit("train_start", step=manager.current_step() + 1, role=spec.role)
    while manager.current_step() < steps:
        start = time.perf_counter()
        manager.first_error = None
        optimizer.zero_grad(set_to_none=False)  # starts this step's quorum (async)
        n = manager.num_participants()  # waits for the quorum (and a heal's transfer)
        replica = manager.participating_rank() if manager.is_participating() else None
        quorum_id = int(getattr(manager, "_quorum_id", -1))  # no public getter in any release
        step = manager.current_step() + 1  # a healed replica is at its source's step now
        world = n * group_size
        if first and spec.role == "replacement" and replica is not None and step == 1:
            # It participates at step 0, so nobody in its quorum has made progress: the job
            # it was started to rejoin is over (a healing replica does not participate).
            events.emit("train_end", step=0, gen=quorum_id, world_size=world, reason="nothing to rejoin")
            return 0
        first = False
        if quorum_id != gen:
            events.emit(
                "reconfigured",
                gen=quorum_id,
                world_size=world,
                step=step,
                participating=replica is not None,
                pg_handle=pg_handle(manager._pg),
            )
            gen = quorum_id
        try:
            share, fields = compute(step, replica, n)
        except GroupLost as lost:
            message = str(lost)
            events.emit("detect", how=classify(message), error=message[:300], gen=gen, step=step, scope="group")
            return EXIT_FAILED
        optimizer.step()  # should_commit(); steps the wrapped optimizer only on a commit
        if manager.current_step() == step:
            failing = False
            on_commit()
            events.emit(
                "step_end",
                step=step,
                step_s=time.perf_counter() - start,
                gen=gen,
                world_size=world,
                loss_share=share() if replica is not None else 0.0,
                participating=replica is not None,
                **fields,
            )
            continue
        t_err, message = manager.first_error or (time.monotonic_ns(), first_line(manager.errored()))
        if message and not failing:
            events.emit("detect", t=t_err, how=classify(message), error=message[:300], gen=gen, step=step)
            failing = True
        events.emit("discard", step=step, gen=gen, world_size=world, error=message[:200])
    # The final parameters' digest: replicas that diverged show as "corrupted".
    events.emit(
        "train_end", step=manager.current_step(), gen=gen, **workload.checksum(), **device_memory(workload.device)
    )
    return 0
