"""What ftbench's probe costs a job it watches: the plain DDP example with and without it.

One *round* runs ``examples/ddp/train.py`` (four ranks, started as torchrun starts its
workers, around the harness's store) twice, back to back in a rotating order: as it is,
and with the probe on its interpreters (:func:`bench.probe.environment`), nothing else
changed. Each run gives rank 0's own timing of its steps after the warm-up (the
script's ``timing:`` line: wall and CPU time), so the probe's cost is the paired ratio
of the two runs' time per step, as :mod:`bench.calibrate.harness_cost` pairs its runs.
Beside it, what the probe measures of itself: the time spent in its step hook per
step, in every rank (``probe_s`` at each rank's exit), which is its cost attributed,
not only bounded, and resolved where the ratio of two noisy runs is not.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench.calibrate.harness_cost import Measured, Round
from bench.calibrate.reference import READY_TIMEOUT_S
from bench.calibrate.user import start_rank
from bench.probe import environment
from bench.procs.hygiene import kill_all
from bench.procs.store import bound_store

PATHS = ("bare", "probe")
WARMUP_STEPS = 20
"""Leading steps left out of the timing, on both paths."""
TIMING = re.compile(rb"^timing: (\d+) steps ([0-9.]+) s wall ([0-9.]+) s cpu", re.M)
TARGET_SHARE = 0.01
"""The most the probe may cost a step (issue contract): its hook's time over a step's."""


def example_run(*, probe: bool, steps: int, world_size: int, out: Path) -> Measured:
    """One fault-free run of the example script, with or without the probe."""
    out.mkdir(parents=True, exist_ok=True)
    env = environment(out, dict(os.environ)) if probe else None
    store = bound_store("127.0.0.1", timeout_s=READY_TIMEOUT_S)
    args = ["--steps", str(steps), "--log-every", str(steps), "--warmup-steps", str(WARMUP_STEPS)]
    args += ["--pg-timeout-s", "60"]
    procs = [start_rank(r, world_size, store.port, args, out / f"rank{r}.log", env) for r in range(world_size)]
    try:
        for p in procs:
            p.wait(timeout=READY_TIMEOUT_S + steps)
    except subprocess.TimeoutExpired as err:
        raise RuntimeError("the example run did not finish") from err
    finally:
        kill_all([p.pid for p in procs])
    # The timing line is printed once the steps are done; what the interpreter's
    # teardown does after it (torch's gloo teardown sometimes aborts) is not a step.
    found = TIMING.search((out / "rank0.log").read_bytes())
    if found is None:
        raise RuntimeError(f"the example run failed (exit codes {[p.returncode for p in procs]}); see {out}")
    n, wall, cpu = int(found.group(1)), float(found.group(2)), float(found.group(3))
    hook = _hook_per_step(out) if probe else float("nan")
    return Measured(step_s=wall / n, cpu_step_s=cpu / n, between_s=hook)


def _hook_per_step(out: Path) -> float:
    """The probe's step hook, seconds per step, the mean over the ranks."""
    per_rank = []
    for path in out.glob("probe-rank*.jsonl"):
        for line in path.read_text().splitlines():
            e = json.loads(line)
            if e["event"] == "proc_exit" and e.get("steps"):
                per_rank.append(float(e["probe_s"]) / int(e["steps"]))
    return statistics.fmean(per_rank) if per_rank else float("nan")


def rounds(count: int, *, steps: int = 1000, world_size: int = 4) -> list[Round]:
    """``count`` rounds of the two runs, in a rotating order."""
    found: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="ftbench-probe-cost-") as tmp:
        for i in range(count):
            order = PATHS if i % 2 == 0 else PATHS[::-1]
            found.append(
                {
                    path: example_run(
                        probe=path == "probe", steps=steps, world_size=world_size, out=Path(tmp) / f"{i}-{path}"
                    )
                    for path in order
                }
            )
    return found
