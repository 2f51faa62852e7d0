"""One trial of the bare reference: plain torch.distributed ranks, faulted from outside.

The harness hosts the c10d store (as ftbench's launcher does), starts ``world_size``
fresh interpreters running ``bare_rank.py`` (no ftbench code in them), waits until every
rank is warmed up, sleeps a uniformly drawn part of one step and signals the victim,
stamping ``time.monotonic_ns()`` just before ``kill(2)`` as ftbench's injector does.
Each survivor stamps the moment its collective raises; the first and the last of those
minus the injection are what ftbench's ``ttd_rank_s`` and ``ttd_all_s`` are compared with.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.calibrate.cases import STEPS_BEFORE_FAULT, Case
from bench.procs.hygiene import kill_all, set_pdeathsig
from bench.procs.store import bound_store

RANK_SCRIPT = Path(__file__).with_name("bare_rank.py")
READY_TIMEOUT_S = 180.0
"""Fresh interpreters importing torch on a loaded 2-core machine take seconds each."""


@dataclass(frozen=True, slots=True)
class BareTrial:
    first_s: float
    """First survivor's exception minus the injection (NaN if none raised)."""
    last_s: float
    """Last survivor's, if every survivor raised (else NaN)."""
    step_s: float
    """The ranks' median step time before the fault."""
    jitter_s: float
    stamp_to_sent_s: float
    error: str = ""


def run_bare_trial(case: Case, *, trial_dir: Path, seed: int, trial: int) -> BareTrial:
    """Run one bare trial of ``case``; its rank lines and logs stay in ``trial_dir``."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    out = trial_dir / "bare.jsonl"
    out.unlink(missing_ok=True)
    store = bound_store("127.0.0.1", timeout_s=READY_TIMEOUT_S)
    procs = [_start_rank(case, rank, store.port, out, trial_dir) for rank in range(case.world_size)]
    try:
        ready = _await(out, "ready", case.world_size, procs, READY_TIMEOUT_S)
        if len(ready) < case.world_size:
            return BareTrial(math.nan, math.nan, math.nan, 0.0, 0.0, error="ranks did not warm up")
        step_s = sorted(float(r["step_s"]) for r in ready)[len(ready) // 2]
        jitter = random.Random(f"bare:{seed}:{trial}:{case.name}").uniform(0.0, step_s)
        time.sleep(jitter)
        victim = procs[case.victim]
        sig = signal.SIGKILL if case.fault == "kill" else signal.SIGSTOP
        t0 = time.monotonic_ns()
        os.kill(victim.pid, sig)
        t_sent = time.monotonic_ns()
        if case.fault == "stall":
            time.sleep(case.duration_s)
            os.kill(victim.pid, signal.SIGCONT)
        survivors = [p for i, p in enumerate(procs) if i != case.victim]
        _wait_exit(survivors, case.pg_timeout_s + 30)
        raised = {
            int(r["rank"]): int(r["t"]) for r in _lines(out) if r["event"] == "raised" and r["rank"] != case.victim
        }
        first = (min(raised.values()) - t0) / 1e9 if raised else math.nan
        last = (max(raised.values()) - t0) / 1e9 if len(raised) == case.world_size - 1 else math.nan
        return BareTrial(first, last, step_s, jitter, (t_sent - t0) / 1e9, error="" if raised else "no survivor raised")
    finally:
        kill_all([p.pid for p in procs])
        for p in procs:
            p.wait(timeout=30)


def _start_rank(case: Case, rank: int, port: int, out: Path, trial_dir: Path) -> subprocess.Popen[bytes]:
    args = [
        "--out",
        str(out),
        "--store",
        f"127.0.0.1:{port}",
        "--rank",
        str(rank),
        "--world-size",
        str(case.world_size),
        "--workload",
        case.workload,
        "--steps",
        str(STEPS_BEFORE_FAULT + 5000),
        "--warmup",
        str(STEPS_BEFORE_FAULT),
        "--timeout-s",
        str(case.pg_timeout_s),
    ]
    return start_bare(args, trial_dir / f"bare-rank{rank}.log")


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


def _lines(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line.endswith("}")]


def _await(
    out: Path, event: str, count: int, procs: list[subprocess.Popen[bytes]], timeout_s: float
) -> list[dict[str, Any]]:
    """Lines of ``event`` once ``count`` are there, a rank died, or the deadline passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [r for r in _lines(out) if r["event"] == event]
        if len(found) >= count or any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            return found
        time.sleep(0.005)


def _wait_exit(procs: list[subprocess.Popen[bytes]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.005)
