"""``failstop``: the old model, any fault ends the job; it measures detection only.

The stock stack: plain ``torch.distributed``, collectives called as users call them
(blocking ``dist.all_reduce``, DDP's built-in reducer). The first failed collective
ends the rank (exit 1). Nothing tears the job down early and no agent watches the ranks
(the supervisor only observes), so ``ttd_s`` and ``ttd_all_s`` show how long plain
``torch.distributed`` takes to tell the first and the last survivor.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.scenario.strategy import STRATEGIES, Strategy


@dataclass(frozen=True, kw_only=True, slots=True)
class FailstopParams:
    """Fail-stop has no knobs: the first error ends the rank, and so the job."""


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
