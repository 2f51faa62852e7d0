"""restart's harness side: one instrumented torchrun per trial (:class:`ElasticJob`).

``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` is set: with the default (the workers reuse the
agent's rendezvous store) every restart failed here with "Gloo connectFullMesh failed"
(docs/facts.md).
"""

from __future__ import annotations

from typing import Any

import torch

from bench.jobs.elastic import ElasticJob
from bench.rank.checkpoint import unavailable
from bench.scenario.model import Scenario
from bench.strategies.restart import RestartParams


class RestartJob(ElasticJob):
    agent_module = "bench.strategies.restart.torchrun"
    log_name = "torchrun.log"

    @classmethod
    def unavailable(cls, scenario: Scenario) -> str | None:
        w, p = scenario.workload, scenario.recovery.params
        return unavailable(p.checkpoint, w.backend, w.device, w.world_size)

    def launcher_args(self, nproc: int, rdzv_port: int, *, nnodes: int = 1, endpoint: str = "127.0.0.1") -> list[str]:
        params: RestartParams = self.ctx.scenario.recovery.params
        elastic = params.min_nodes and params.min_nodes < nnodes
        return [
            f"--nnodes={params.min_nodes}:{nnodes}" if elastic else f"--nnodes={nnodes}",
            f"--nproc-per-node={nproc}",
            f"--max-restarts={params.max_restarts}",
            f"--monitor-interval={params.monitor_interval_s}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}:{rdzv_port}",
            f"--rdzv-id=ftbench-{self.ctx.events_dir.name}",
        ] + ([f"--rdzv-conf={conf}"] if (conf := params.rdzv_conf()) else [])

    def agent_env(self) -> dict[str, str]:
        return super().agent_env() | {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}

    def versions(self) -> dict[str, Any]:
        return {"torchrun": torch.__version__, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
