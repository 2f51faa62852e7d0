"""``failstop``: the old model, any fault ends the job; it measures detection only.

The first failed collective ends the rank (exit 1). Nothing tears the job down early,
so ``ttd_all_s`` shows how long plain ``torch.distributed`` takes to tell every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.strategies import STRATEGIES, Strategy


@dataclass(frozen=True, kw_only=True, slots=True)
class FailstopParams:
    """Fail-stop has no knobs: the first error ends the rank, and so the job."""


STRATEGIES.register(
    Strategy(
        name="failstop",
        params=FailstopParams,
        impl="bench.strategies.supervisor:SupervisedJob",
        rank_policy="bench.strategies.failstop.policy:FailStop",
        namespaces=True,
        default=True,
        summary="any fault ends the job; measures detection only",
    )
)
