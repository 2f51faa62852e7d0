"""nvrx-launcher's harness side: one instrumented ``ft_launcher`` per trial.

The fault-tolerance settings go to ft_launcher the way NVRx documents: a YAML file with a
``fault_tolerance`` section (``--ft-cfg-path``), since only a file can switch a timeout
off (``null``), which the sections mode needs for the heartbeat timeouts. JSON is YAML,
so the file is written with ``json``.
"""

from __future__ import annotations

import json
from typing import Any

from bench.jobs.elastic import ElasticJob
from bench.jobs.nvrx import nvrx_unavailable, nvrx_version
from bench.rank.checkpoint import unavailable
from bench.scenario.model import Scenario
from bench.strategies.nvrx_launcher import NVRxLauncherParams

STEP_SECTION = "step"
"""The section each worker opens around every step in sections mode."""


def ft_config(p: NVRxLauncherParams) -> dict[str, Any]:
    """The ``fault_tolerance`` section of NVRx's config for these knobs.

    In heartbeat mode no section timeout is set; in sections mode the heartbeat timeouts
    are off (``None``), as in NVRx's ``fault_tol_cfg_sections.yaml``: the workers send no
    heartbeats, and the initial-heartbeat timeout would otherwise kill them."""
    heartbeat = p.hang_detection == "heartbeat"
    return {
        "workload_check_interval": p.workload_check_interval_s,
        "initial_rank_heartbeat_timeout": p.initial_rank_heartbeat_timeout_s if heartbeat else None,
        "rank_heartbeat_timeout": p.rank_heartbeat_timeout_s if heartbeat else None,
        "rank_section_timeouts": {} if heartbeat else {STEP_SECTION: p.step_section_timeout_s},
        "rank_out_of_section_timeout": None if heartbeat else p.rank_out_of_section_timeout_s,
        "node_health_check_interval": p.node_health_check_interval_s,
        "rank_termination_signal": p.rank_termination_signal,
        "enable_nic_monitor": p.enable_nic_monitor,
    }


def launcher_args(p: NVRxLauncherParams, *, nproc: int, rdzv_port: int, run_id: str, cfg_path: str) -> list[str]:
    """ft_launcher's arguments (everything but the worker command)."""
    return [
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={p.max_restarts}",
        f"--monitor-interval={p.monitor_interval_s}",
        f"--workers-stop-timeout={p.workers_stop_timeout_s}",
        f"--ft-restart-policy={p.restart_policy}",
        f"--ft-cfg-path={cfg_path}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{rdzv_port}",
        f"--rdzv-id={run_id}",
    ]


class NVRxLauncherJob(ElasticJob):
    agent_module = "bench.strategies.nvrx_launcher.agent"
    log_name = "ft_launcher.log"

    @classmethod
    def unavailable(cls, scenario: Scenario) -> str | None:
        w, p = scenario.workload, scenario.recovery.params
        return nvrx_unavailable() or unavailable(p.checkpoint, w.backend, w.device, w.world_size)

    @property
    def params(self) -> NVRxLauncherParams:
        params: NVRxLauncherParams = self.ctx.scenario.recovery.params
        return params

    def launcher_args(self, nproc: int, rdzv_port: int, *, nnodes: int = 1, endpoint: str = "127.0.0.1") -> list[str]:
        assert (nnodes, endpoint) == (1, "127.0.0.1"), "nvrx-launcher runs on one host (no launch.agents)"
        name = self.ctx.events_dir.name
        cfg = self.ctx.trial_dir / f"ft-config-{name}.yaml"
        cfg.write_text(json.dumps({"fault_tolerance": ft_config(self.params)}, indent=1))
        return launcher_args(self.params, nproc=nproc, rdzv_port=rdzv_port, run_id=f"ftbench-{name}", cfg_path=str(cfg))

    def versions(self) -> dict[str, Any]:
        return {"nvidia-resiliency-ext": nvrx_version(), "hang_detection": self.params.hang_detection}
