"""``nvrx-launcher``: whole-job restart under NVRx's ``ft_launcher``, with hang detection by
its rank monitors.

The real ``nvidia_resiliency_ext.fault_tolerance.launcher`` (NVRx's own fork of
torchrun's agent, with one rank monitor process per worker) starts fresh worker
interpreters. Each worker talks to its rank monitor through NVRx's
``RankMonitorClient``, as NVRx documents for users: a heartbeat after every step, or a
``step`` section around every step. A monitor whose rank stops beating (or overstays a
section) kills the rank; the agent then restarts the whole group, which resumes from the
last checkpoint, exactly as under ``restart`` (with its ``checkpoint`` designs). ftbench
observes the agent and the monitors through events only (``agent.py``); the worker side is ``restart``'s policy plus
the client (``policy.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from bench.jobs.nvrx import NVRX
from bench.rank.checkpoint import Design, check_design
from bench.scenario.config import bounded
from bench.scenario.strategy import STRATEGIES, Strategy

if TYPE_CHECKING:
    from bench.scenario.model import Scenario


@dataclass(frozen=True, kw_only=True, slots=True)
class NVRxLauncherParams:
    """Defaults are NVRx 0.4.1's own (``FaultToleranceConfig``, ``ft_launcher --help``),
    except ``max_restarts`` (ft_launcher's default, 0, would make every fault fatal)."""

    hang_detection: Literal["heartbeat", "sections"] = "heartbeat"
    """How workers prove progress to their rank monitor: a heartbeat after every step, or
    a ``step`` section around every step (NVRx's two client APIs)."""
    rank_heartbeat_timeout_s: float = bounded(2700.0, gt=0)
    """``rank_heartbeat_timeout``: a monitor whose rank sent no heartbeat for this long
    declares it hung and kills it (heartbeat mode only)."""
    initial_rank_heartbeat_timeout_s: float = bounded(3600.0, gt=0)
    """``initial_rank_heartbeat_timeout``: the same, from the worker's connection to its
    first heartbeat (import, model, process group and the first step: heartbeat mode)."""
    step_section_timeout_s: float = bounded(2700.0, gt=0)
    """``rank_section_timeouts = {step = ...}``: how long one step may keep its section
    open (sections mode only; NVRx has no default per section, this mirrors the
    heartbeat's)."""
    rank_out_of_section_timeout_s: float = bounded(3600.0, gt=0)
    """``rank_out_of_section_timeout``: how long a worker may run outside any section
    (its start-up, until the first step opens one; sections mode only)."""
    workload_check_interval_s: float = bounded(5.0, gt=0)
    """``workload_check_interval``: how often each rank monitor checks its rank's
    timeouts, so a hang is seen up to this much after its timeout."""
    node_health_check_interval_s: float = bounded(5.0, gt=0)
    """``node_health_check_interval``: the monitors' GPU (and NIC) health checks (they
    disable themselves where NVML is missing)."""
    rank_termination_signal: Literal["SIGKILL", "SIGTERM"] = "SIGKILL"
    """``rank_termination_signal``: what a monitor sends a hung rank (after a SIGCONT)."""
    enable_nic_monitor: bool = True
    """``enable_nic_monitor``: NIC link health monitoring in the rank monitors."""
    restart_policy: Literal["any-failed", "min-healthy"] = "any-failed"
    """``--ft-restart-policy``: restart when any worker group fails (torchrun's rule), or
    only when fewer than the minimum of nodes stay healthy."""
    max_restarts: int = bounded(3, ge=0)
    """``--max-restarts``: whole-group restarts before the job is failed."""
    monitor_interval_s: float = bounded(0.1, gt=0)
    """``--monitor-interval``: how often the agent polls its workers."""
    workers_stop_timeout_s: float = bounded(30.0, gt=0)
    """``--workers-stop-timeout``: SIGTERM to SIGKILL when the agent stops its workers to
    restart them."""
    checkpoint_every: int = bounded(50, ge=1)
    """The ranks save the training state every this many steps; a restart resumes from
    the last finished save (as under ``restart``)."""
    checkpoint: Design = "torch-save"
    """Where the state lives, as under ``restart``: ``torch-save``, ``dcp``, ``dcp-async``,
    ``nvrx-async`` (needs GPUs) or ``nvrx-local``; docs/strategies.md, "Checkpoint designs"."""


def check(scenario: Scenario, file: str) -> None:
    """The checkpoint design can run."""
    p: NVRxLauncherParams = scenario.recovery.params
    w = scenario.workload
    check_design(
        p.checkpoint,
        backend=w.backend,
        device=w.device,
        world_size=w.world_size,
        file=file,
        key="recovery.nvrx-launcher.checkpoint",
    )


LAUNCHER_NVRX = replace(
    NVRX,
    supported="<0.5",
    unsupported_why="its ft_launcher no longer has fault_tolerance._torch_elastic_compat, which this strategy's "
    "launcher uses",
)
"""NVRx as this strategy drives it: releases from 0.5 removed what its agent imports."""


STRATEGIES.register(
    Strategy(
        name="nvrx-launcher",
        params=NVRxLauncherParams,
        impl="bench.strategies.nvrx_launcher.job:NVRxLauncherJob",
        rank_policy="bench.strategies.nvrx_launcher.policy:NVRxLauncher",
        stack="NVRx's ft_launcher (its torchrun-derived agent and rank monitors), RankMonitorClient in the workers",
        components=("agent",),
        # The rank monitor that timed out names its rank; the agent's failure record its first failure.
        blame=("detect@rank_monitor:of_rank", "detect@agent:first_failure"),
        timeouts=("workload.pg_timeout_s", "recovery.nvrx-launcher.rank_heartbeat_timeout_s"),
        rank_side_faults=True,
        unbound_servers=(
            "ft_launcher's c10d rendezvous store",
            "the store rank 0 hosts for the workers' process group (env://)",
        ),
        packages=(LAUNCHER_NVRX,),
        check=check,
        phases=(
            ("agent", "detect@agent"),  # the agent's monitor sees the failed (or killed) worker
            ("teardown", "teardown_end"),  # surviving workers stopped
            ("rendezvous", "rendezvous_end"),  # NVRx's c10d re-rendezvous done
            ("spawn", "workers_started"),  # new worker processes (and rank monitors) exist
            ("import", "import_done"),  # ...and have imported torch and ftbench
            ("cuda", "cuda_ready"),  # ...and made their CUDA context (GPU ranks only)
            ("build", "workload_ready"),  # ...and built model and optimizer in host memory
            ("upload", "upload_end"),  # ...and moved them to the GPU (GPU ranks only)
            ("pg", "reconfigured"),  # ...and formed the process group
            ("restore", "restore_end"),  # ...and loaded the checkpoint
        ),
        summary="whole-job restart under NVRx's ft_launcher; hangs detected by its rank monitors",
    )
)
