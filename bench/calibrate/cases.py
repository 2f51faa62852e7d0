"""What calibration compares: a fault, a workload and a timeout, run both ways.

The ftbench side of a case is an ordinary scenario (fail-stop, the stock stack; the
injection spread uniformly over a step with ``jitter = "step"``, as the bare side
spreads its own), so it runs through the same code as every ``ftbench run``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from bench.scenario.loader import parse
from bench.scenario.model import Scenario

STEPS_BEFORE_FAULT = 30
"""Steps before the injection: both sides are in their steady state by then."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    name: str
    workload: Literal["ddp", "allreduce"]
    fault: Literal["kill", "stall"]
    pg_timeout_s: float
    duration_s: float = 0.0
    """How long a stall lasts (past the timeout, so that it is detected)."""
    world_size: int = 4
    victim: int = 2
    """Never rank 0: a bare loop's store lives elsewhere, but users' rank 0 often logs."""

    def scenario(self, seed: int, *, start_method: str = "auto") -> Scenario:
        """The ftbench side: this case as a scenario of the stock fail-stop strategy, its
        ranks started as ``launch.start_method`` says (how a launch mode is calibrated)."""
        fault: dict[str, Any] = {
            "kind": self.fault,
            "target": {"ranks": [self.victim]},
            "trigger": {"at_step": STEPS_BEFORE_FAULT, "jitter": "step"},
        }
        if self.fault == "stall":
            fault["duration_s"] = self.duration_s
        raw = {
            "name": f"calibrate-{self.name}",
            "workload": {
                "kind": self.workload,
                "world_size": self.world_size,
                "steps": 2000,
                "warmup_steps": 5,
                "pg_timeout_s": self.pg_timeout_s,
            },
            "faults": [fault],
            "recovery": {"strategy": "failstop"},
            "launch": {"start_method": start_method},
            "measure": {"seed": seed, "deadline_s": self.pg_timeout_s + self.duration_s + 60},
        }
        return parse(raw, file=f"<calibration case {self.name}>")


CASES: tuple[Case, ...] = (
    Case(name="kill-ddp", workload="ddp", fault="kill", pg_timeout_s=10),
    Case(name="kill-allreduce", workload="allreduce", fault="kill", pg_timeout_s=10),
    Case(name="stall-ddp", workload="ddp", fault="stall", duration_s=8, pg_timeout_s=5),
)
BY_NAME = {c.name: c for c in CASES}
