"""The bare reference loop (``bare_rank.py``): ftbench's workloads without ftbench's code.

Its ranks write JSON lines to one file: ``started`` after the first step, ``ready``
after ``--warmup`` steps with their median step time, ``raised`` when a step raises.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.calibrate.cases import STEPS_BEFORE_FAULT, Case, Moment
from bench.calibrate.reference import Progress, lines
from bench.procs.hygiene import set_pdeathsig

RANK_SCRIPT = Path(__file__).with_name("bare_rank.py")


class BareLoop:
    """``bare_rank.py`` ranks of one trial, their lines and logs in ``trial_dir``."""

    def __init__(self, case: Case, moment: Moment, trial_dir: Path) -> None:
        self.case, self.trial_dir = case, trial_dir
        # The ranks say when they have run this many steps (and time them until then).
        self.warmup = moment.at_step if moment.at_step is not None else STEPS_BEFORE_FAULT
        trial_dir.mkdir(parents=True, exist_ok=True)
        self.out = trial_dir / "bare.jsonl"
        self.out.unlink(missing_ok=True)
        self.started_ns: int | None = None

    def start(self, rank: int, store_port: int) -> subprocess.Popen[bytes]:
        c = self.case
        args = ["--out", str(self.out), "--store", f"127.0.0.1:{store_port}", "--rank", str(rank)]
        args += ["--world-size", str(c.world_size), "--workload", c.workload, "--steps", "10000000"]
        args += ["--warmup", str(self.warmup), "--timeout-s", str(c.pg_timeout_s)]
        return start_bare(args, self.trial_dir / f"bare-rank{rank}.log")

    def progress(self) -> Progress:
        records = self._records()
        if self.started_ns is None and any(r["event"] == "started" for r in records):
            self.started_ns = time.monotonic_ns()
        ready = [r for r in records if r["event"] == "ready"]
        if len(ready) < self.case.world_size:
            return Progress(steps=1 if self.started_ns else 0, first_step_ns=self.started_ns, step_s=0.0)
        step_s = sorted(float(r["step_s"]) for r in ready)[len(ready) // 2]
        return Progress(steps=self.warmup, first_step_ns=self.started_ns, step_s=step_s)

    def raised(self) -> dict[int, int]:
        return {int(r["rank"]): int(r["t"]) for r in self._records() if r["event"] == "raised"}

    def _records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in lines(self.out)]


def start_bare(args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """``bare_rank.py ARGS`` in a fresh interpreter that dies with the harness."""
    log = open(log_path, "wb")  # noqa: SIM115 (the child holds it)
    try:
        return subprocess.Popen(
            [sys.executable, str(RANK_SCRIPT), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=set_pdeathsig,
            env=dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo"),
        )
    finally:
        log.close()
