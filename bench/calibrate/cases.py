"""What calibration compares: a fault, a workload and a timeout, run two ways.

The ftbench side of a case is an ordinary scenario (the stock fail-stop or torchrun
restart strategy; the injection spread uniformly over a step with ``jitter = "step"``,
as the reference loops spread theirs), so it runs through the same code as every
``ftbench run``. Each case names what it is compared with:

- ``bare``: ``bare_rank.py``, the ddp and allreduce workloads' computation transcribed
  without ftbench's code;
- ``user``: the plain DDP script of ``examples/ddp/train.py``, written as users write
  one and independent of ftbench's workload code;
- ``blackbox``: that same script run by ftbench as a command job, watched from outside
  (the probe and its output): how exact the black box is, on the user's own machine.

Both sides are faulted at the same :class:`Moment`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal

from bench.scenario.loader import parse
from bench.scenario.model import Scenario

STEPS_BEFORE_FAULT = 30
"""Steps the reference loops time before the injection can come (their step time is the
median of these)."""

DETECTION = (("first", "ttd_rank_s"), ("last", "ttd_all_s"))
"""(name, trials.csv column) of the first and the last survivor's detection."""
RECOVERY = (("ttd", "ttd_s"), ("ttr", "ttr_s"), ("downtime", "downtime_s"), ("steps_lost", "steps_lost"))
"""What a restart case compares beyond detection."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Moment:
    """When in a job's life the fault comes, the same for every side of a comparison:
    after step ``at_step``, or ``after_s`` seconds after the first step, then at a
    uniformly drawn moment of the next step."""

    at_step: int | None = None
    after_s: float | None = None

    def __post_init__(self) -> None:
        if (self.at_step is None) == (self.after_s is None):
            raise ValueError("a moment is exactly one of at_step and after_s")

    def trigger(self) -> dict[str, Any]:
        """The scenario trigger of this moment."""
        when: dict[str, Any] = {"at_step": self.at_step} if self.at_step is not None else {"after_s": self.after_s}
        return when | {"jitter": "step"}

    def reached(self, step: int, since_first_step_s: float | None) -> bool:
        """Whether a loop that has finished ``step`` steps, the first of them
        ``since_first_step_s`` ago (None before it), has come to this moment."""
        if self.at_step is not None:
            return step >= self.at_step
        return since_first_step_s is not None and since_first_step_s >= (self.after_s or 0.0)

    def upper_s(self, step_s: float = 0.05) -> float:
        """A generous bound on how long a job takes to get there (for deadlines)."""
        return self.after_s if self.after_s is not None else (self.at_step or 0) * step_s

    def text(self) -> str:
        return f"step {self.at_step}" if self.at_step is not None else f"{self.after_s:g} s of training"


STEADY_S = 20.0
"""Seconds of training after which a kill is seen as a job long in training sees it: a
survivor's exit and a victim's death wait on the kernel freeing their memory, which is
quicker while the per-CPU page lists are still large from start-up's allocations; the
lists shrink back over the first ~20 s (docs/calibration.md, "When in a job's life")."""

DEFAULT_MOMENT = Moment(after_s=STEADY_S)


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
    reference: Literal["bare", "user", "blackbox"] = "bare"
    """What ftbench is compared with."""
    strategy: Literal["failstop", "restart"] = "failstop"
    """The stock stack both sides run (restart: torchrun, a checkpoint every 50 steps)."""
    figures: tuple[tuple[str, str], ...] = DETECTION
    """What is compared: (name, trials.csv column)."""

    def scenario(self, seed: int, *, start_method: str = "auto", moment: Moment = DEFAULT_MOMENT) -> Scenario:
        """The ftbench side: this case as a scenario of its stock strategy, its ranks
        started as ``launch.start_method`` says (how a launch mode is calibrated), the
        fault at ``moment``."""
        recovery: dict[str, Any] = {"strategy": self.strategy}
        if self.strategy == "restart":
            recovery["restart"] = {"checkpoint_every": 50, "monitor_interval_s": 0.1}
        raw = {
            "name": f"calibrate-{self.name}",
            "workload": {
                "kind": self.workload,
                "world_size": self.world_size,
                "steps": 1_000_000,
                "warmup_steps": 5,
                "pg_timeout_s": self.pg_timeout_s,
            },
            "faults": [self._fault(moment)],
            "recovery": recovery,
            "launch": {"start_method": start_method},
            "measure": {"seed": seed, "deadline_s": self.deadline_s(moment)},
        }
        return parse(raw, file=f"<calibration case {self.name}>")

    def blackbox(self, seed: int, *, moment: Moment = DEFAULT_MOMENT, script: str) -> Scenario:
        """The black-box side: ``script`` (examples/ddp/train.py) as a command job, the
        way its stack launches it: once per rank ending at once after a failure, as
        fail-stop's ranks do; or under torchrun as ftbench's restart strategy runs it."""
        common = [script, "--steps", "1000000", "--pg-timeout-s", f"{self.pg_timeout_s:g}", "--seed", str(seed)]
        common += ["--log-every", "1", "--hard-exit"]
        command: dict[str, Any]
        if self.strategy == "failstop":
            command = {"argv": [sys.executable, *common], "per_rank": True}
        else:
            torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1"]
            torchrun += [f"--nproc-per-node={self.world_size}", "--max-restarts=3", "--monitor-interval=0.1"]
            torchrun += ["--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:{free_port}", "--rdzv-id=ftbench"]
            command = {
                "argv": [*torchrun, *common, "--ckpt-dir", "{checkpoint_dir}", "--ckpt-every", "50"],
                "env": {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
            }
        raw = {
            "name": f"calibrate-{self.name}",
            "workload": {
                "kind": "command",
                "world_size": self.world_size,
                "steps": 1_000_000,
                "warmup_steps": 5,
                "pg_timeout_s": self.pg_timeout_s,
                "progress": "plain",
                "commands": [command],
            },
            "faults": [self._fault(moment)],
            "measure": {"seed": seed, "deadline_s": self.deadline_s(moment)},
        }
        return parse(raw, file=f"<calibration case {self.name}, black box>")

    def _fault(self, moment: Moment) -> dict[str, Any]:
        fault: dict[str, Any] = {"kind": self.fault, "target": {"ranks": [self.victim]}, "trigger": moment.trigger()}
        if self.fault == "stall":
            fault["duration_s"] = self.duration_s
        return fault

    def deadline_s(self, moment: Moment) -> float:
        """A trial's deadline: start-up, the moment, the fault and its detection."""
        return 60 + moment.upper_s() + self.pg_timeout_s + self.duration_s


CASES: tuple[Case, ...] = (
    Case(name="kill-ddp", workload="ddp", fault="kill", pg_timeout_s=10),
    Case(name="kill-ddp-user", workload="ddp", fault="kill", pg_timeout_s=10, reference="user"),
    Case(name="kill-allreduce", workload="allreduce", fault="kill", pg_timeout_s=10),
    Case(name="stall-ddp", workload="ddp", fault="stall", duration_s=8, pg_timeout_s=5),
    Case(name="kill-ddp-blackbox", workload="ddp", fault="kill", pg_timeout_s=10, reference="blackbox"),
    Case(
        name="restart-ddp-blackbox",
        workload="ddp",
        fault="kill",
        pg_timeout_s=10,
        reference="blackbox",
        strategy="restart",
        figures=RECOVERY,
    ),
)
BY_NAME = {c.name: c for c in CASES}
DEFAULT_CASES = ("kill-ddp", "kill-ddp-user", "kill-allreduce", "stall-ddp", "kill-ddp-blackbox")
"""What ``ftbench calibrate`` runs without ``--case`` (the restart case takes a minute a
trial pair; ask for it by name)."""
