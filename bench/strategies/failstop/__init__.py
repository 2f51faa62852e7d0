"""``failstop``: the old model, any fault ends the job; it measures detection only.

The stock stack: plain ``torch.distributed``, collectives called as users call them
(blocking ``dist.all_reduce``, DDP's built-in reducer). The first failed collective
ends the rank (exit 1). Nothing tears the job down early and no agent
watches the ranks (the supervisor only observes), so ``ttd_s`` and ``ttd_all_s`` show
how long plain ``torch.distributed`` takes to tell the first and the last survivor. A
survivor that was blocked on another survivor learns only when that one's process
group goes away, so how survivors end is part of ``ttd_all_s`` (the ``exit`` knob).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bench.scenario.strategy import STRATEGIES, Strategy


@dataclass(frozen=True, kw_only=True, slots=True)
class FailstopParams:
    """The first error ends the rank, and so the job."""

    exit: Literal["immediate", "raise"] = "immediate"
    """How a survivor's process ends after its first failed step (its detection is
    recorded first either way), which decides when the peers still blocked on it learn
    of the failure, and so ``ttd_all_s``. ``immediate``: ``os._exit(1)`` the moment the
    failure is recorded, as a job does that must not hang in its process group's
    teardown; the kernel closes the rank's sockets once it has freed its memory
    (20-40 ms). ``raise``: the error propagates out of the training code, the
    excepthook prints it and the interpreter exits as an unhandled error ends a script;
    its sockets close only when the interpreter's teardown frees the objects that hold
    the process group, 0.25-0.55 s later here, a time that belongs to the program (what
    it imported and holds), not to torch.distributed (docs/calibration.md)."""


STRATEGIES.register(
    Strategy(
        name="failstop",
        params=FailstopParams,
        impl="bench.jobs.supervisor:SupervisedJob",
        rank_policy="bench.strategies.failstop.policy:FailStop",
        stack="plain torch.distributed (blocking all_reduce, DDP's built-in reducer)",
        supervised=False,
        agents=True,
        namespaces=True,
        default=True,
        summary="any fault ends the job; measures detection only",
    )
)
