"""``ray-train``: Ray Train's own ``TorchTrainer`` on a real multi-node Ray cluster.

Each host of the trial is a Ray node in a network namespace of its own (``ray start
--head`` on h0, ``ray start --address`` on the others, every port explicit), with a
private ``/tmp`` that goes with its last process (:mod:`.cluster`). A driver on h0 runs
``TorchTrainer(...).fit()`` (:mod:`.driver`); Ray's controller starts the worker group,
Ray's ``TorchConfig`` forms the gloo group, and each worker runs ftbench's shared
training loop under :mod:`.rank`'s policy, checkpointing through ``ray.train.report`` and
resuming from ``ray.train.get_checkpoint()``. On a failure Ray's controller restarts the
whole worker group within ``FailureConfig(max_failures)``. ftbench only observes the
controller, through Ray Train's own callback hooks (:mod:`.observe`): the failure it
sees, its decision, the group down, the next group up; each is a phase.

Ray's timing knobs are explicit in every point: the controller's poll interval and the
worker health-check timeout (``RAY_TRAIN_*`` in the driver's environment, which Ray
propagates to its controller), the worker-group start timeout, the control service's
node health checks (``RAY_health_check_*`` in the nodes' environment), and the
process-group timeout (``TorchConfig(timeout_s)`` = ``workload.pg_timeout_s``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.scenario.config import ConfigError, bounded
from bench.scenario.strategy import STRATEGIES, Package, Strategy

if TYPE_CHECKING:
    from bench.scenario.model import Scenario

RAY = Package(column="ray", module="ray", dists=("ray",))
"""What runs record of Ray (the ``ray`` column)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RayTrainParams:
    """Defaults are Ray's own (``ray.train.v2._internal.constants``, Ray's
    ``ray_config_def.h``), except ``max_failures``: Ray's 0 would make every fault fatal."""

    max_failures: int = bounded(3, ge=-1)
    """``FailureConfig(max_failures)``: worker-group restarts before the run fails (-1:
    without end)."""
    min_workers: int = bounded(0, ge=0)
    """0: a fixed group, ``ScalingConfig(num_workers=world_size)``; else Ray's elastic
    mode, ``ScalingConfig(num_workers=(min_workers, world_size))``: a restart starts as
    many workers as the cluster's live resources hold, at least this many (what lets a
    job outlive a lost node)."""
    checkpoint_every: int = bounded(50, ge=1)
    """Steps between ``ray.train.report(..., checkpoint=...)`` calls (rank 0 hands Ray a
    ``torch.save`` of the state, Ray persists it to the shared storage path); a restarted
    group resumes from ``ray.train.get_checkpoint()``, so up to this many steps are lost."""
    health_check_interval_s: float = bounded(2.0, gt=0)
    """``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S``: the controller polls its workers this often
    (a failure is seen up to this long after the workers report it)."""
    worker_health_check_timeout_s: float = bounded(600.0, gt=0)
    """``RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S``: a worker whose poll has hung this long
    (stopped, partitioned) is marked dead by the controller."""
    worker_group_start_timeout_s: float = bounded(60.0, gt=0)
    """``RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S``: how long a new group may wait for its
    placement group (resources of a lost node that the control service still counts)
    before the controller tries again."""
    node_health_check_initial_delay_ms: int = bounded(5000, ge=0)
    """``RAY_health_check_initial_delay_ms``: the control service's (GCS's) delay before
    it health-checks a node."""
    node_health_check_period_ms: int = bounded(3000, ge=1)
    """``RAY_health_check_period_ms``: how often the GCS health-checks each node."""
    node_health_check_timeout_ms: int = bounded(10000, ge=1)
    """``RAY_health_check_timeout_ms``: one health check's deadline."""
    node_health_check_failure_threshold: int = bounded(5, ge=1)
    """``RAY_health_check_failure_threshold``: failed checks in a row before the GCS
    declares the node dead (its actors with it)."""

    def driver_env(self) -> dict[str, str]:
        """Ray Train's knobs, as its users set them: in the driver's environment, which
        Ray propagates to the controller and the workers."""
        return {
            "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": str(self.health_check_interval_s),
            "RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S": str(self.worker_health_check_timeout_s),
            "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": str(self.worker_group_start_timeout_s),
        }

    def node_env(self) -> dict[str, str]:
        """Ray's system config for the node health checks, read by the GCS from the
        environment of ``ray start`` (set on every node alike)."""
        return {
            "RAY_health_check_initial_delay_ms": str(self.node_health_check_initial_delay_ms),
            "RAY_health_check_period_ms": str(self.node_health_check_period_ms),
            "RAY_health_check_timeout_ms": str(self.node_health_check_timeout_ms),
            "RAY_health_check_failure_threshold": str(self.node_health_check_failure_threshold),
        }


def check(scenario: Scenario, file: str) -> None:
    """Ray nodes are hosts in namespaces (never the loopback); an elastic minimum fits."""
    p: RayTrainParams = scenario.recovery.params
    if scenario.launch.network == "loopback":
        raise ConfigError(
            file,
            "launch.network",
            "'auto' or 'namespaces' with strategy ray-train (each Ray node is a host in a namespace of its own)",
            "loopback",
        )
    if scenario.launch.agents:
        raise ConfigError(
            file, "launch.agents", "false with strategy ray-train (Ray's raylets are its node agents)", True
        )
    if p.min_workers > scenario.workload.world_size:
        raise ConfigError(
            file,
            "recovery.ray-train.min_workers",
            f"0 (a fixed group) or at most workload.world_size ({scenario.workload.world_size})",
            p.min_workers,
        )


STRATEGIES.register(
    Strategy(
        name="ray-train",
        params=RayTrainParams,
        impl="bench.strategies.ray_train.job:RayTrainJob",
        rank_policy="bench.strategies.ray_train.rank:RayTrainPolicy",
        stack="Ray Train's TorchTrainer and controller on a Ray cluster (a raylet per host), TorchConfig's gloo group",
        supervised=False,
        workloads=("ddp", "transformer"),
        rank_side_faults=False,  # the training function runs in a thread of Ray's worker: no signal hooks
        namespaces=True,
        namespaced_hosts=True,
        host_commands=True,
        components=(),
        blame=("detect@controller:dead",),  # the workers Ray's controller found dead (actor or node lost)
        timeouts=("workload.pg_timeout_s", "recovery.ray-train.worker_health_check_timeout_s"),
        packages=(RAY,),
        check=check,
        phases=(
            ("controller", "detect@controller"),  # Ray's controller poll sees the failed workers
            ("decision", "restart_decision@controller"),  # its failure policy decides to restart
            ("teardown", "worker_group_down@controller"),  # the old worker group is shut down
            # A new group that did not start within the start timeout (its placement group
            # waits for a lost node's resources until the GCS declares it dead) is retried:
            ("placement", "start_retry_decision@controller"),
            ("schedule", "worker_group_start@controller"),  # the last start of a new group begins
            ("start", "worker_group_up@controller"),  # its actors exist and TorchConfig's group is formed
            ("launch", "training_start@controller"),  # the training function is launched on them
            ("build", "workload_ready"),  # ...which has built model and optimizer
            ("restore", "restore_end"),  # ...and loaded get_checkpoint()
        ),
        summary="Ray Train's TorchTrainer on a multi-node Ray cluster: its controller restarts the worker group",
    )
)
