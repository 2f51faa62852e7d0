"""reinit's harness side: supervised ranks, and a replacement for each death with ``regrow``."""

from __future__ import annotations

from dataclasses import replace

from bench.jobs.supervisor import SupervisedJob
from bench.rank.entry import RankSpec
from bench.strategies.reinit import ReinitParams


class ReinitJob(SupervisedJob):
    def spec(self, rank: int, role: str) -> RankSpec:
        # A replacement learns the world it joins from the store, not from its spec.
        spec = super().spec(rank, role)
        return spec if role == "initial" else replace(spec, members=())

    def replacement_delay(self, rank: int) -> float | None:
        params: ReinitParams = self.ctx.scenario.recovery.params
        return params.regrow_delay_s if params.regrow else None
