"""``nvrx-inprocess``: NVRx's in-process restart (``nvidia_resiliency_ext.inprocess``).

Each rank is started by ftbench's supervisor and runs the shared training loop wrapped
in NVRx's real ``inprocess.Wrapper``: NVRx's TCPStore (hosted by rank 0), its monitor
thread, monitor process (with its sibling heartbeats), progress watchdog,
``AbortTorchDistributed``, rank assignment and barriers. On a fault the surviving ranks
stay alive: NVRx aborts their process group, finalizes, checks health, waits for every
rank at its iteration barrier (a dead rank's monitor process arrives for it), reassigns
ranks without the dead ones and calls the training function again, which forms a new
process group and resumes from the last checkpoint, as NVRx's examples do.

ftbench only observes (``observe.py``): the Abort, Finalize, HealthCheck, Initialize and
RankAssignment the Wrapper is given are NVRx's own (or NVRx's default of none), each
behind a callable that records an event and calls it; two store methods NVRx's monitors
use are wrapped the same way, to stamp when NVRx itself learns of a fault.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Literal

from bench.jobs.nvrx import NVRX
from bench.rank.checkpoint import Design, check_design
from bench.scenario.config import ConfigError, bounded
from bench.scenario.strategy import STRATEGIES, Strategy

if TYPE_CHECKING:
    from bench.scenario.model import Scenario


@dataclass(frozen=True, kw_only=True, slots=True)
class NVRxInprocessParams:
    """``inprocess.Wrapper``'s knobs; defaults are NVRx 0.4.1's own."""

    soft_timeout_s: float = bounded(60.0, gt=0)
    """``soft_timeout``: a rank that shows no progress for this long (its main thread
    ran no Python code: NVRx's progress watchdog) is interrupted and restarted."""
    hard_timeout_s: float = bounded(90.0, gt=0)
    """``hard_timeout``: a rank that shows no progress for this long is terminated by its
    monitor process (SIGTERM, then SIGKILL after ``termination_grace_time_s``)."""
    heartbeat_interval_s: float = bounded(1.0, gt=0)
    """``heartbeat_interval``: how often each monitor process beats and checks its
    sibling's heartbeat."""
    heartbeat_timeout_s: float = bounded(30.0, gt=0)
    """``heartbeat_timeout``: a monitor process whose heartbeat is this old is declared
    unresponsive (its rank is terminated in NVRx's records)."""
    barrier_timeout_s: float = bounded(120.0, gt=0)
    """``barrier_timeout``: the initial and iteration barriers (every rank, or the
    monitor process of a dead one, must arrive within it)."""
    completion_timeout_s: float = bounded(120.0, gt=0)
    """``completion_timeout``: the barrier after the training function returned."""
    monitor_thread_interval_s: float = bounded(1.0, gt=0)
    """``monitor_thread_interval``: how often each rank's monitor thread looks for an
    interruption recorded by anyone."""
    monitor_process_interval_s: float = bounded(1.0, gt=0)
    """``monitor_process_interval``: how often each monitor process checks that its rank
    is alive and on time."""
    progress_watchdog_interval_s: float = bounded(1.0, gt=0)
    """``progress_watchdog_interval``: how often the progress watchdog stamps the main
    thread's progress."""
    last_call_wait_s: float = bounded(1.0, ge=0)
    """``last_call_wait``: after the first interruption, how long the monitor thread waits
    for other ranks to report theirs before it aborts."""
    termination_grace_time_s: float = bounded(5.0, ge=0)
    """``termination_grace_time``: SIGTERM to SIGKILL of a rank past its hard timeout."""
    rank_assignment: Literal["shift", "fill_gaps"] = "shift"
    """``rank_assignment``: NVRx's ``ShiftRanks`` (its default: survivors keep their order)
    or ``FillGaps`` (the highest ranks move into the holes), with ``ActivateAllRanks``."""
    health_check: Literal["none", "cuda", "fault_counter"] = "none"
    """``health_check``: none (NVRx's default), ``CudaHealthCheck`` (a no-op on a CPU-only
    build: it checks only an initialised CUDA context), or ``FaultCounter``."""
    max_rank_faults: int = bounded(0, ge=0)
    """``FaultCounter(max_rank_faults)``: faults a rank may cause before it is terminated
    (health_check = "fault_counter"; 0: no limit)."""
    max_iterations: int = bounded(0, ge=0)
    """``RetryController(max_iterations)``, the Wrapper's ``initialize``: restart
    iterations before NVRx gives up (0: no limit, as without it)."""
    min_world_size: int = bounded(1, ge=1)
    """``RetryController(min_world_size)``: fewer live ranks than this end the job."""
    checkpoint_every: int = bounded(50, ge=1)
    """The ranks save the training state every this many steps (inside NVRx's
    ``atomic()``); every restart iteration resumes from the last finished save, as NVRx's
    examples do."""
    checkpoint: Design = "torch-save"
    """Where the state lives, as under ``restart``: ``torch-save``, ``dcp``, ``dcp-async``
    or ``nvrx-async`` (needs GPUs); not ``nvrx-local``, whose replication cliques need a
    world size that the survivors of a loss no longer have. docs/strategies.md,
    "Checkpoint designs"."""


STORE_PORT_KEY = "nvrx/store_port"
"""Launcher-store key holding the port of NVRx's TCPStore (the harness picks it, rank 0
hosts the store there, every rank and monitor process connects to it)."""

#: NVRx's own checks of the Wrapper's timeouts (``Wrapper.__init__``, ``enforce_value``):
#: each pair must be strictly increasing.
ORDERED: tuple[tuple[str, str], ...] = (
    ("soft_timeout_s", "hard_timeout_s"),
    ("hard_timeout_s", "barrier_timeout_s"),
    ("monitor_process_interval_s", "barrier_timeout_s"),
    ("heartbeat_timeout_s", "barrier_timeout_s"),
    ("heartbeat_interval_s", "heartbeat_timeout_s"),
    ("monitor_process_interval_s", "heartbeat_timeout_s"),
    ("monitor_process_interval_s", "soft_timeout_s"),
    ("monitor_thread_interval_s", "soft_timeout_s"),
    ("progress_watchdog_interval_s", "soft_timeout_s"),
)


def check(scenario: Scenario, file: str) -> None:
    """NVRx refuses these at run time inside every rank; say so when the file is read."""
    p: NVRxInprocessParams = scenario.recovery.params
    names = {f.name for f in fields(p)}
    for low, high in ORDERED:
        assert low in names and high in names
        if not getattr(p, low) < getattr(p, high):
            raise ConfigError(
                file, f"recovery.nvrx-inprocess.{low}", f"less than {high} ({getattr(p, high)})", getattr(p, low)
            )
    if p.checkpoint == "nvrx-local":
        raise ConfigError(
            file,
            "recovery.nvrx-inprocess.checkpoint",
            "torch-save, dcp, dcp-async or nvrx-async: nvrx-local's replication cliques (pairs of ranks) cannot "
            "be formed again by the odd number of survivors in-process restart goes on with",
            p.checkpoint,
        )
    w = scenario.workload
    check_design(
        p.checkpoint,
        backend=w.backend,
        device=w.device,
        world_size=w.world_size,
        file=file,
        key="recovery.nvrx-inprocess.checkpoint",
    )
    if p.min_world_size > scenario.workload.world_size:
        raise ConfigError(
            file, "recovery.nvrx-inprocess.min_world_size", "at most workload.world_size", p.min_world_size
        )


STRATEGIES.register(
    Strategy(
        name="nvrx-inprocess",
        params=NVRxInprocessParams,
        impl="bench.strategies.nvrx_inprocess.job:NVRxInprocessJob",
        rank_entry="bench.strategies.nvrx_inprocess.policy:rank_main",
        rank_policy="bench.strategies.nvrx_inprocess.policy:NVRxInprocess",
        stack="NVRx in-process restart: inprocess.Wrapper (its store, monitors, abort, rank assignment)",
        supervised=False,  # NVRx's monitor processes notice a dead rank; nothing else does
        components=("store",),
        blame=("nvrx_rank_assignment_start:terminated",),  # NVRx's terminated ranks at its next iteration
        timeouts=("workload.pg_timeout_s", "recovery.nvrx-inprocess.soft_timeout_s"),
        unbound_servers=("NVRx's inprocess TCPStore (hosted by rank 0)",),
        packages=(NVRX,),
        phases=(
            ("abort", "nvrx_abort_end"),  # monitor threads: last-call wait, AbortTorchDistributed
            ("finalize", "nvrx_finalize_end"),  # main threads interrupted, Finalize done
            ("restart_health", "nvrx_restart_health_end"),  # HealthCheck after the fault
            ("barrier", "nvrx_rank_assignment_start"),  # NVRx's iteration barrier passed
            ("assign", "nvrx_rank_assignment_end"),  # RankAssignment: new ranks, new world size
            ("initialize", "nvrx_initialize_end"),  # the next iteration's Initialize
            ("iteration_health", "nvrx_iteration_health_end"),  # ...and its HealthCheck
            ("pg", "reconfigured"),  # the training function formed a new process group
            ("restore", "restore_end"),  # ...and loaded the checkpoint
        ),
        check=check,
        summary="NVRx in-process restart: survivors restart the training function without new processes",
    )
)
