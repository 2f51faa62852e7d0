"""restart's harness side: one instrumented torchrun per trial.

``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` is set: with the default (the workers reuse the
agent's rendezvous store) every restart failed here with "Gloo connectFullMesh failed"
(docs/facts.md).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any

import torch

from bench.procs.hygiene import marked_pids
from bench.rank.entry import spec_to_json
from bench.strategies.base import Job, rank_spec
from injectors.link.netns import enter


def free_port() -> int:
    """A free loopback port for the rendezvous (torchrun needs a number up front)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Restart(Job):
    def start(self) -> None:
        ctx = self.ctx
        s = ctx.point.scenario
        params = s.recovery.params
        n = s.workload.world_size
        spec = rank_spec(
            ctx,
            -1,
            "initial",
            members=tuple(range(n)),
            pdeathsig=False,
            checkpoint_dir=str(ctx.trial_dir / f"ckpt-{ctx.events_dir.name}"),
        )
        spec_path = ctx.trial_dir / f"spec-{ctx.events_dir.name}.json"
        spec_path.write_text(spec_to_json(spec))
        args = [
            sys.executable,
            "-m",
            "bench.strategies.restart.torchrun",
            str(ctx.events_dir),
            "--",
            "--nnodes=1",
            f"--nproc-per-node={n}",
            f"--max-restarts={params.max_restarts}",
            f"--monitor-interval={params.monitor_interval_s}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{free_port()}",
            f"--rdzv-id=ftbench-{ctx.events_dir.name}",
            "-m",
            "bench.rank.entry",
            str(spec_path),
        ]
        env = dict(os.environ, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", OMP_NUM_THREADS="1")
        self.log = open(ctx.events_dir / "torchrun.log", "wb")  # noqa: SIM115 (closed by close())
        # torchrun's stores listen on every interface: where the trial has a private
        # network namespace, the agent (and so its workers) start inside it.
        namespace = ctx.store_namespace
        self.proc = subprocess.Popen(
            args,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=(lambda: enter(namespace)) if namespace else None,
        )

    def poll(self, timeout_s: float) -> bool:
        """Over when the agent has exited and none of its workers is left: workers
        outlive a killed agent (docs/facts.md), and what they do then is part of the trial."""
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        host = self.ctx.host
        return not (set(marked_pids(host.run_id)) - host.infrastructure())

    def close(self) -> None:
        self.ctx.host.sweep_trial()  # the agent, its workers, and any worker it orphaned
        if hasattr(self, "proc"):
            self.proc.wait(timeout=30)
            self.log.close()

    def versions(self) -> dict[str, Any]:
        return {"torchrun": torch.__version__, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
