"""``reinit``: ftbench's own in-process recovery design (not a stock stack).

Survivors abort through the launcher's store, agree on the next membership, form a new
process group on a fresh store prefix, make their state consistent (a peer sends its
state if committed steps differ) and train on with the global batch split among fewer
ranks. A stalled rank that wakes up after the others moved on is told it was left out:
with ``regrow`` it rejoins at a step boundary, and a replacement is started for each
dead rank; without, it leaves. The protocol is in :mod:`bench.rank.membership`, the rank
side in ``policy.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.scenario.config import bounded
from bench.scenario.strategy import STRATEGIES, Strategy


@dataclass(frozen=True, kw_only=True, slots=True)
class ReinitParams:
    join_window_s: float = bounded(0.5, gt=0)
    """After an abort, how long the agreement on the next world waits for members that
    neither check in nor are known dead (a stalled rank), counted from the last check-in
    or reported death: survivors still arriving keep it open, however many there are.
    When every member has checked in or is known dead (the supervisor reports exits) it
    closes at once, so this only costs time for hung members."""
    regrow: bool = False
    """Start a replacement for each rank that died; a rank left out of the next world
    (it saw the failure after the agreement closed) rejoins in its own process. Both join
    the running world at a step boundary and take their state from a live peer (time to
    full strength)."""
    regrow_delay_s: float = bounded(1.0, ge=0)
    """How long after a rank's death its replacement is started (a scheduler's delay)."""


STRATEGIES.register(
    Strategy(
        name="reinit",
        params=ReinitParams,
        impl="bench.jobs.supervisor:RegrowingJob",
        rank_policy="bench.strategies.reinit.policy:Reinit",
        stack="abortable collectives and a membership protocol over the launcher's store",
        own_design=True,
        start_method="forkserver",  # replacements are warm spares: forked, not imported
        namespaces=True,
        blame=("isolate@rank:excluded",),  # the members the survivors' new world leaves out
        agents=True,
        phases=(("isolate", "isolate"), ("reconfigure", "reconfigured"), ("restore", "restore_end")),
        summary="ftbench's design: survivors abort through the store, re-form a smaller group, train on",
    )
)
