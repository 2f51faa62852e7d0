"""``restart``: whole-job restart from the last checkpoint under torchrun's elastic agent.

The real ``torch.distributed.run`` and its ``LocalElasticAgent`` (instrumented only by
events, :mod:`bench.strategies.restart.torchrun`) start fresh worker interpreters, so a
restart pays the Python and torch import like a real job does; each phase of the
restart is a figure of its own. The ranks save a checkpoint every ``checkpoint_every``
steps, by the design the ``checkpoint`` knob names (:mod:`bench.rank.checkpoint`); a
restarted world resumes from the last finished one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.rank.checkpoint import Design, check_design
from bench.scenario.config import ConfigError, bounded
from bench.scenario.limits import MAX_SECONDS
from bench.scenario.strategy import STRATEGIES, Strategy

if TYPE_CHECKING:
    from bench.scenario.model import Scenario


@dataclass(frozen=True, kw_only=True, slots=True)
class RestartParams:
    max_restarts: int = bounded(3, ge=0)
    """torchrun ``--max-restarts``: whole-group restarts before the job is failed."""
    checkpoint_every: int = bounded(50, ge=1)
    """The ranks save the training state every this many steps; a restart resumes from
    the last finished save, so up to this many steps are lost (more while an
    asynchronous save is still running)."""
    checkpoint: Design = "torch-save"
    """Where the state lives: ``torch-save`` (group rank 0 writes one file; the loop
    waits), ``dcp`` (torch.distributed.checkpoint.save: every rank writes its part),
    ``dcp-async`` (its async_save: the loop waits for the staging copy, the next save or
    the end for the previous save), ``nvrx-async`` (NVRx's asynchronous writer; needs
    GPUs) or ``nvrx-local`` (NVRx's local checkpoints, replicated to a peer);
    docs/strategies.md, "Checkpoint designs"."""
    min_nodes: int = bounded(0, ge=0)
    """With host agents: torchrun ``--nnodes MIN:MAX``, so that the job goes on with as few
    as this many hosts once one is lost (``host-down``) instead of waiting for it. 0: every
    host, ``--nnodes N`` (the job cannot outlive a host)."""
    monitor_interval_s: float = bounded(0.1, gt=0)
    """torchrun ``--monitor-interval``: how often the agent polls its workers."""
    rdzv_join_timeout_s: int | None = bounded(None, ge=1, le=MAX_SECONDS)
    """c10d rendezvous ``join_timeout`` (``--rdzv-conf``): how long a rendezvous may take
    to complete. Unset: torch's default (600 s)."""
    rdzv_last_call_timeout_s: int | None = bounded(None, ge=0, le=MAX_SECONDS)
    """``last_call_timeout``: the wait for late joiners once the minimum is reached
    (torch: 30 s; it is only paid when the world may grow, ``--nnodes MIN:MAX``)."""
    rdzv_close_timeout_s: int | None = bounded(None, ge=1, le=MAX_SECONDS)
    """``close_timeout``: how long a closing rendezvous waits (torch: 30 s)."""
    rdzv_heartbeat_timeout_s: int | None = bounded(None, ge=1, le=MAX_SECONDS)
    """``heartbeat_timeout``: within which an agent's keep-alive must land before its
    node is considered dead (torch: 5 s)."""

    def rdzv_conf(self) -> str:
        """``--rdzv-conf`` with the keys set here (torch's defaults for the others)."""
        conf = {
            "join_timeout": self.rdzv_join_timeout_s,
            "last_call_timeout": self.rdzv_last_call_timeout_s,
            "close_timeout": self.rdzv_close_timeout_s,
            "heartbeat_timeout": self.rdzv_heartbeat_timeout_s,
        }
        return ",".join(f"{k}={v}" for k, v in conf.items() if v is not None)


def check(scenario: Scenario, file: str) -> None:
    """``min_nodes`` is a count of the scenario's hosts; the checkpoint design can run."""
    p: RestartParams = scenario.recovery.params
    w = scenario.workload
    check_design(
        p.checkpoint,
        backend=w.backend,
        device=w.device,
        world_size=w.world_size,
        file=file,
        key="recovery.restart.checkpoint",
    )
    hosts = scenario.workload.world_size // scenario.launch.ranks_per_host
    if p.min_nodes and not (scenario.launch.agents and p.min_nodes <= hosts):
        raise ConfigError(
            file,
            "recovery.restart.min_nodes",
            f"0, or with launch.agents = true at most the number of hosts ({hosts})",
            p.min_nodes,
        )


STRATEGIES.register(
    Strategy(
        name="restart",
        params=RestartParams,
        impl="bench.strategies.restart.job:RestartJob",
        rank_policy="bench.strategies.restart.policy:RestartPolicy",
        stack="torchrun's elastic agent; plain torch.distributed in the workers",
        components=("agent",),
        blame=("detect@agent:first_failure",),  # torchrun's root cause: its first observed failure
        agents=True,
        check=check,
        unbound_servers=("torchrun's c10d rendezvous store", "the store torchrun's agent hosts for its workers"),
        phases=(
            ("agent", "detect@agent"),  # the agent's monitor sees the failed worker
            ("teardown", "teardown_end"),  # surviving workers stopped
            ("rendezvous", "rendezvous_end"),  # c10d re-rendezvous done
            ("spawn", "workers_started"),  # new worker processes exist
            ("import", "import_done"),  # ...and have imported torch and ftbench
            ("cuda", "cuda_ready"),  # ...and made their CUDA context (GPU ranks only)
            ("build", "workload_ready"),  # ...and built model and optimizer in host memory
            ("upload", "upload_end"),  # ...and moved them to the GPU (GPU ranks only)
            ("pg", "reconfigured"),  # ...and formed the process group
            ("restore", "restore_end"),  # ...and loaded the checkpoint
        ),
        summary="whole-job restart from the last checkpoint under torchrun's elastic agent",
    )
)
