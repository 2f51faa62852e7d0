"""The independent reference loop: ``examples/ddp/train.py``, plain DDP as users write it.

Started the way torchrun starts its workers (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``, ``TORCHELASTIC_USE_AGENT_STORE``: the store is the launcher's, here the
harness's), it shares no code with ftbench's workloads or with ``bare_rank.py``. The
harness follows it as it would any job: rank 0's progress lines (``step N loss X``,
printed every step here) say how far it is, and ``--failure-log`` says when each rank's
step raised. It ends at once after a failure (``--hard-exit``), as ftbench's fail-stop
ranks do by default: the last survivor then learns when the kernel has torn a peer
down, not when a program's own interpreter teardown reaches its process group, a time
that belongs to each program (docs/calibration.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import bench
from bench.calibrate.cases import Case
from bench.calibrate.reference import Progress, lines
from bench.procs.hygiene import set_pdeathsig

SCRIPT = Path(bench.__file__).resolve().parent.parent / "examples" / "ddp" / "train.py"
"""In a clone (ftbench installed from it, editable or not); see :func:`unavailable`."""
STEP_LINE = re.compile(rb"^step (\d+) loss ")
MIN_STEPS_TIMED = 10
"""Steps the harness watches before it trusts its estimate of one step's time."""


def unavailable() -> str | None:
    """Why the user-style loop cannot run here, or None."""
    if not SCRIPT.is_file():
        return f"the example script {SCRIPT} is not here (ftbench calibrates against it from a clone)"
    return None


class UserLoop:
    """The example script's ranks of one trial, their output in ``trial_dir``."""

    def __init__(self, case: Case, trial_dir: Path, *, seed: int) -> None:
        self.case, self.trial_dir, self.seed = case, trial_dir, seed
        trial_dir.mkdir(parents=True, exist_ok=True)
        self.failures = trial_dir / "failures.jsonl"
        self.failures.unlink(missing_ok=True)
        self.stdout = trial_dir / "user-rank0.log"
        self._offset, self._partial = 0, b""
        self._steps = 0
        self._first_ns: int | None = None
        self._timed: tuple[int, int] | None = None
        """(step, when seen) of the first progress line after the first: the origin of
        the step-time estimate (the first step carries the start-up)."""
        self._step_s = 0.0

    def start(self, rank: int, store_port: int) -> subprocess.Popen[bytes]:
        c = self.case
        args = ["--steps", "10000000", "--pg-timeout-s", str(c.pg_timeout_s), "--seed", str(self.seed)]
        args += ["--log-every", "1", "--failure-log", str(self.failures), "--hard-exit"]
        return start_rank(rank, c.world_size, store_port, args, self.trial_dir / f"user-rank{rank}.log")

    def progress(self) -> Progress:
        """Rank 0's newest progress line, read on from where the last look stopped."""
        try:
            with open(self.stdout, "rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except FileNotFoundError:
            chunk = b""
        self._offset += len(chunk)
        *whole, self._partial = (self._partial + chunk).split(b"\n")
        now = time.monotonic_ns()
        for line in whole:
            m = STEP_LINE.match(line)
            if m:
                self._steps = int(m.group(1))
                self._first_ns = self._first_ns or now
                if self._timed is None and self._steps > 1:
                    self._timed = (self._steps, now)
        if self._timed is not None and self._steps - self._timed[0] >= MIN_STEPS_TIMED:
            self._step_s = (now - self._timed[1]) / 1e9 / (self._steps - self._timed[0])
        return Progress(steps=self._steps, first_step_ns=self._first_ns, step_s=self._step_s)

    def raised(self) -> dict[int, int]:
        return {int(r["rank"]): int(r["t"]) for r in map(json.loads, lines(self.failures))}


def start_rank(
    rank: int, world_size: int, store_port: int, args: list[str], log_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """The example script as rank ``rank``, started the way torchrun starts a worker
    around the harness's store (``env``: the environment to start from), dying with
    the harness; its output goes to ``log_path``."""
    worker = dict(
        os.environ if env is None else env,
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(store_port),
        TORCHELASTIC_USE_AGENT_STORE="True",
        OMP_NUM_THREADS="1",
        GLOO_SOCKET_IFNAME="lo",
    )
    log = open(log_path, "wb")  # noqa: SIM115 (the child holds it)
    try:
        return subprocess.Popen(
            [sys.executable, str(SCRIPT), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=set_pdeathsig,
            env=worker,
        )
    finally:
        log.close()
