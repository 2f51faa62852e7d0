"""nvrx-inprocess's harness side: ftbench's supervisor starts the ranks, NVRx does the rest.

The supervisor only starts the rank processes and reaps them: it restarts nobody and its
notice of a death is no detection (``supervised = False``), since in-process restart keeps
the survivors and NVRx's own monitor processes notice the dead. It picks the port of
NVRx's TCPStore (rank 0 hosts it; ranks read the port from the launcher's store) and
gives the ranks a checkpoint directory.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bench.jobs.nvrx import nvrx_unavailable, nvrx_version
from bench.jobs.supervisor import SupervisedJob
from bench.procs.store import free_port
from bench.rank.checkpoint import unavailable
from bench.rank.entry import RankSpec
from bench.scenario.model import Scenario
from bench.strategies.nvrx_inprocess import STORE_PORT_KEY


class NVRxInprocessJob(SupervisedJob):
    @classmethod
    def unavailable(cls, scenario: Scenario) -> str | None:
        w, p = scenario.workload, scenario.recovery.params
        return nvrx_unavailable() or unavailable(p.checkpoint, w.backend, w.device, w.world_size)

    def start_services(self) -> None:
        self.store.set(STORE_PORT_KEY, str(free_port()))

    def spec(self, rank: int, role: str) -> RankSpec:
        return replace(super().spec(rank, role), checkpoint_dir=str(self.ctx.checkpoint_dir))

    def poll(self, timeout_s: float) -> bool:
        self.reap()
        return super().poll(timeout_s)

    def reap(self) -> None:
        """Reap dead ranks at once, as a real node agent (torchrun, srun) does.

        The supervisor learns of an exit when the rank's sentinel pipe closes, but NVRx's
        monitor process, forked from the rank, holds that pipe open until it exits too;
        until then the dead rank stays a zombie. NVRx's hard-timeout termination waits
        for its target's pid to disappear, so it would wait its whole
        ``termination_grace_time`` for a zombie: an artefact of the harness, not NVRx.
        ``exitcode`` polls with ``waitpid(WNOHANG)``, which reaps."""
        for r in self.launcher.running():
            code = r.process.exitcode if r.process is not None else None
            if code is not None:
                r.exitcode = code
                self.on_exit(r)

    def versions(self) -> dict[str, Any]:
        return {"nvidia-resiliency-ext": nvrx_version()}
