"""``giveup``: a strategy declared outside ftbench, to show that one folder is enough.

Its ranks form one process group; on the first failed collective each survivor records
``gave_up`` and leaves with the exit code of its knob. Nothing in ftbench names it: it
is found through ``FTBENCH_PLUGINS=tests.plugins.giveup`` (docs/adding-a-strategy.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.scenario.config import bounded
from bench.scenario.strategy import STRATEGIES, Strategy


@dataclass(frozen=True, kw_only=True, slots=True)
class GiveUpParams:
    exit_code: int = bounded(1, ge=1, le=2)
    """Exit code of a rank that gave up (1: failed, 2: also failed, to tell them apart)."""


STRATEGIES.register(
    Strategy(
        name="giveup",
        params=GiveUpParams,
        impl="bench.jobs.supervisor:SupervisedJob",
        rank_policy="tests.plugins.giveup.policy:GiveUp",
        stack="plain torch.distributed",
        summary="test plug-in: survivors give up at the first failure",
    )
)
