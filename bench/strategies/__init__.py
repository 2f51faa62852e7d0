"""Recovery strategies: the systems under test.

Each strategy is a plug-in with one contract: given the workload and the launcher, run
the job and emit the events of DESIGN.md. Knobs come from the scenario's
``[recovery.<strategy>]`` table, so one file can sweep ``recovery.strategy`` and still
tune each strategy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
    regrow: bool = False
    """Start a replacement for each rank that died; it joins the running world at a
    step boundary and takes its state from a live peer (time to full strength)."""
    regrow_delay_s: float = bounded(1.0, ge=0)
    """How long after a rank's death its replacement is started (a scheduler's delay)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RestartParams:
    max_restarts: int = bounded(3, ge=0)
    """torchrun ``--max-restarts``: whole-group restarts before the job is failed."""
    checkpoint_every: int = bounded(50, ge=1)
    """Rank 0 saves the training state every this many steps; a restart resumes from
    the last save, so up to this many steps are lost."""
    monitor_interval_s: float = bounded(0.1, gt=0)
    """torchrun ``--monitor-interval``: how often the agent polls its workers."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TorchFTParams:
    """Defaults are torchft's own (``torchft_lighthouse --help``, ``Manager.__init__``).
    The gloo timeout of the replicas' process groups is ``workload.pg_timeout_s``."""

    min_replicas: int = bounded(1, ge=1)
    """Lighthouse ``--min_replicas``: replica groups needed to form a quorum. Equal to the
    number of groups, survivors wait for the replacement instead of going on without it."""
    join_timeout_ms: int = bounded(60000, ge=0)
    """Lighthouse ``--join_timeout_ms``: how long a quorum waits for replicas that
    heartbeat but have not asked to join. After a death the dead replica still counts as
    heartbeating until ``heartbeat_timeout_ms``, so survivors resume after the shorter of
    the two (with a majority of the heartbeating replicas; FACTS.md)."""
    heartbeat_timeout_ms: int = bounded(5000, ge=1)
    """Lighthouse ``--heartbeat_timeout_ms``: a replica whose heartbeats stop for this
    long is no longer waited for."""
    quorum_tick_ms: int = bounded(100, ge=1)
    """Lighthouse ``--quorum_tick_ms``: how often it re-evaluates a pending quorum."""
    min_replica_size: int = bounded(1, ge=1)
    """Manager ``min_replica_size``: participants needed to commit a step."""
    timeout_s: float = bounded(60.0, gt=0)
    """Manager ``timeout``: should_commit, checkpoint metadata and HTTP transfer."""
    quorum_timeout_s: float = bounded(60.0, gt=0)
    """Manager ``quorum_timeout``: past it, waiting for a quorum raises and the replica
    dies (to be restarted)."""
    connect_timeout_s: float = bounded(60.0, gt=0)
    """Manager ``connect_timeout``: RPC connections to the lighthouse and managers."""
    init_sync: bool = False
    """Manager ``init_sync``: heal every replica from one peer at step 0. Off (torchft's
    advice when weights are initialised identically, as the workload's seed does), so
    that the first step is the same full step as under every other strategy (with it on,
    TorchFT zeroes the healing replicas' shares of step 1)."""
    restart: bool = True
    """Start a new incarnation of a replica group that died, as TorchFT's punisher does."""
    restart_delay_s: float = bounded(3.0, ge=0)
    """How long after the death the new incarnation is started."""
    max_restarts: int = bounded(3, ge=0)
    """New incarnations per replica group at most (a replica that keeps crashing must not
    keep the trial busy until its deadline)."""
    ddp_workaround: Literal["auto", "on", "off"] = "auto"
    """Replace TorchFT's DDP comm hook by one that returns a failed bucket unchanged.
    torchft 0.2.0's hook kills the survivors when a peer dies (FACTS.md); ``auto``
    applies the fix to versions that lack it (recorded in run.json), ``off`` measures
    such a version as shipped."""


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
STRATEGIES.register(
    Plugin(
        name="restart",
        params=RestartParams,
        impl="bench.strategies.restart:Restart",
        summary="whole-job restart from the last checkpoint under torchrun's elastic agent",
    )
)
STRATEGIES.register(
    Plugin(
        name="torchft",
        params=TorchFTParams,
        impl="bench.strategies.torchft:TorchFT",
        summary="per-step fault tolerance with torchft: lighthouse quorum, live healing from peers",
    )
)
