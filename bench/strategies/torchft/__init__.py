"""``torchft``: per-step fault tolerance with the real ``torchft`` package.

A trial is a lighthouse and ``workload.world_size`` replica groups of one process each:
each replica runs TorchFT's own stack (Manager, reconfigurable process group,
DistributedDataParallel, OptimizerWrapper, HTTP live healing), observed by ftbench
through events only (``replica.py``). The harness supervises the replicas as TorchFT's
punisher does in its own tests and starts a new incarnation of one that died
``restart_delay_s`` later (``job.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from bench.scenario.config import ConfigError, bounded
from bench.scenario.strategy import STRATEGIES, Package, Strategy

if TYPE_CHECKING:
    from bench.scenario.model import Scenario, WorkloadSpec


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
    the two (with a majority of the heartbeating replicas; docs/facts.md)."""
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
    torchft 0.2.0's hook kills the survivors when a peer dies (docs/facts.md); ``auto``
    applies the fix to versions that lack it (recorded in run.json), ``off`` measures
    such a version as shipped."""
    process_group: Literal["auto", "torchft", "native"] = "auto"
    """The process group handed to each replica's Manager. ``torchft``: torchft's own
    ``ProcessGroupGloo``, which builds a new gloo group on every quorum change
    (rendezvous on the group store of the quorum's first member). ``native``: a torch
    group made by ``init_process_group(..., enable_reconfigure=True)`` (torch 2.14 and
    later, gloo only), which torchft's Manager reconfigures in place with the handles
    the lighthouse exchanged (rendezvous on the launcher's store, which every replica
    reaches); a point whose torch or torchft cannot do it is skipped with the reason.
    ``auto``: ``native`` where it can run, else ``torchft`` (torch 2.13: ``torchft``).
    Each replica records the path it took, read off torchft's objects (event
    ``tf_pg``; ``torchft_pg_path`` in run.json's ``strategy_versions``)."""


def group_size(wl: WorkloadSpec) -> int:
    """Ranks per replica group: ``world_size / replicas`` for the sharded transformer
    under hsdp (the group shards, torchft replicates across groups), else 1."""
    if getattr(wl.params, "parallelism", "ddp") == "hsdp":
        return int(wl.world_size // wl.params.replicas)
    return 1


def group_key(group: int) -> str:
    """The launcher-store key under which the harness publishes the incarnation of
    replica group ``group``: its ranks rendezvous under it, apart from a lost one's."""
    return f"torchft/group{group}/epoch"


def check(scenario: Scenario, file: str) -> None:
    """A trial has ``workload.world_size`` replica groups of one process each: a quorum
    or a commit that needs more of them than exist never forms, and every trial would
    hang until its deadline. A native process group is built on gloo only; whether the
    torch of the point can build one is asked where it runs (``TorchFTJob.unavailable``:
    ``launch.env`` may name another torch than the harness's)."""
    params = scenario.recovery.params
    groups = scenario.workload.world_size // group_size(scenario.workload)
    if params.process_group == "native" and group_size(scenario.workload) > 1:
        raise ConfigError(
            file,
            "recovery.torchft.process_group",
            '"auto" or "torchft" with workload.parallelism = "hsdp" (the native group is built for replica '
            "groups of one rank)",
            params.process_group,
        )
    if params.process_group == "native" and scenario.workload.backend == "nccl":
        raise ConfigError(
            file,
            "recovery.torchft.process_group",
            '"auto" or "torchft" with workload.backend = "nccl" (the native group is built on gloo only)',
            params.process_group,
        )
    for knob in ("min_replicas", "min_replica_size"):
        value = getattr(params, knob)
        if value > groups:
            raise ConfigError(
                file,
                f"recovery.torchft.{knob}",
                f"at most {groups}, the replica groups of a trial",
                value,
            )


STRATEGIES.register(
    Strategy(
        name="torchft",
        params=TorchFTParams,
        impl="bench.strategies.torchft.job:TorchFTJob",
        rank_entry="bench.strategies.torchft.replica:replica_main",
        rank_preload=("torchft",),
        stack="the torchft package (lighthouse, Manager, its DDP and process groups)",
        components=("store", "lighthouse"),
        blame=("detect@lighthouse:dropped_ranks",),  # the replicas a new quorum left out
        timeouts=("workload.pg_timeout_s", "recovery.torchft.heartbeat_timeout_ms"),
        phases=(("lighthouse", "quorum"), ("reconfigure", "reconfigured")),
        rank_side_faults=False,
        workloads=("ddp", "transformer"),
        agents=True,
        unbound_servers=(
            "torchft's Manager (binds [::])",
            "torchft's HTTP checkpoint transport (binds every interface)",
        ),
        packages=(Package(column="torchft", module="torchft", dists=("torchft", "torchft-nightly")),),
        check=check,
        summary="per-step fault tolerance with torchft: lighthouse quorum, live healing from peers",
    )
)
