"""Recovery strategies: the systems under test.

Each strategy is a plug-in with one contract: given the workload and the launcher, run
the job and emit the events of DESIGN.md. Knobs come from the scenario's
``[recovery.<strategy>]`` table, so one file can sweep ``recovery.strategy`` and still
tune each strategy.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.config import bounded
from bench.registry import Plugin, Registry

STRATEGIES: Registry[Plugin] = Registry("strategy")


@dataclass(frozen=True, kw_only=True, slots=True)
class FailstopParams:
    """Fail-stop has no knobs: the first error ends the rank, and so the job."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ReinitParams:
    join_window_s: float = bounded(0.5, gt=0)
    """After an abort, how long the coordinator waits for members that neither report
    in nor are known dead (a stalled rank). Known deaths (the launcher's agent reports
    exits) end the wait at once, so this only costs time for hung members."""


STRATEGIES.register(
    Plugin(
        name="failstop",
        params=FailstopParams,
        impl="bench.strategies.local:FailStop",
        summary="any fault ends the job; measures detection only",
    )
)
STRATEGIES.register(
    Plugin(
        name="reinit",
        params=ReinitParams,
        impl="bench.strategies.local:Reinit",
        summary="survivors abort through the store, re-form a smaller group, train on",
    )
)
