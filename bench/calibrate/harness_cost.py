"""What ftbench costs a workload: fault-free step time through ftbench against the bare loop.

One *round* runs the same fault-free workload three ways, back to back in a rotating
order: the bare loop, ftbench's stock path (nothing of ftbench in the collectives) and
ftbench with the thin fault interposer in the collective path (``launch.interposer =
"always"``: what a rank-side fault costs before it fires). Each run is reduced to the
median step time over every rank's steps after the warm-up.
``tests/bench/test_harness_cost.py`` records the rounds with pytest-benchmark (``make
bench``) and reports the ratios of the medians of the medians.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.calibrate.bare import READY_TIMEOUT_S, start_bare
from bench.procs.hygiene import kill_all
from bench.procs.launcher import ProcessHost
from bench.procs.store import bound_store
from bench.results.writer import RunDir
from bench.run.runner import context
from bench.run.trial import run_trial
from bench.scenario.loader import parse, points

STEPS_LEFT_OUT = 20
"""Leading steps of every rank left out of the medians, on both paths."""


@dataclass(frozen=True, slots=True)
class Round:
    bare_s: float
    ftbench_s: float
    interposed_s: float


def ftbench_step_s(
    workload: str, *, steps: int, world_size: int, host: ProcessHost, out: Path, trial: int, interposer: str = "auto"
) -> float:
    """Median step time of a fault-free fail-stop trial (plain torch.distributed)."""
    raw = {
        "name": f"harness-cost-{workload}",
        "recovery": {"strategy": "failstop"},
        "workload": {
            "kind": workload,
            "world_size": world_size,
            "steps": steps,
            "warmup_steps": STEPS_LEFT_OUT,
            "pg_timeout_s": 60,
        },
        "launch": {"interposer": interposer},
        "measure": {"deadline_s": 300},
    }
    point = points(parse(raw, file="<harness cost>"))[0]
    rundir = RunDir.create(out, point.scenario.name, "bench")
    result = run_trial(context(point, trial, host, rundir, "gloo", fault_free=False))
    if result.outcome != "ended" or not result.facts.completed:
        raise RuntimeError(f"the ftbench run of {workload} did not complete ({result.outcome})")
    return result.facts.ff_step_s


def bare_step_s(workload: str, *, steps: int, world_size: int, out: Path) -> float:
    """Median step time of the bare loop, every rank's steps after the warm-up."""
    out.mkdir(parents=True, exist_ok=True)
    lines = out / "bare.jsonl"
    store = bound_store("127.0.0.1", timeout_s=READY_TIMEOUT_S)
    args = [
        "--store",
        f"127.0.0.1:{store.port}",
        "--world-size",
        str(world_size),
        "--workload",
        workload,
        "--steps",
        str(steps),
        "--warmup",
        str(STEPS_LEFT_OUT),
        "--timeout-s",
        "60",
        "--out",
        str(lines),
    ]
    procs = [start_bare([*args, "--rank", str(r)], out / f"bare-rank{r}.log") for r in range(world_size)]
    try:
        for p in procs:
            p.wait(timeout=READY_TIMEOUT_S + steps)
    except subprocess.TimeoutExpired as err:
        raise RuntimeError(f"the bare run of {workload} did not finish") from err
    finally:
        kill_all([p.pid for p in procs])
    done = [json.loads(line) for line in lines.read_text().splitlines() if '"done"' in line]
    if len(done) != world_size:
        raise RuntimeError(f"the bare run of {workload} did not complete ({len(done)} of {world_size} ranks)")
    return statistics.median(float(s) for d in done for s in d["step_s"][STEPS_LEFT_OUT:])


def rounds(workload: str, *, count: int, steps: int = 1000, world_size: int = 4) -> list[Round]:
    """``count`` rounds of the three fault-free runs, in a rotating order."""
    found = []
    with tempfile.TemporaryDirectory(prefix="ftbench-cost-") as tmp, ProcessHost() as host:

        def run(path: str, i: int) -> float:
            if path == "bare":
                return bare_step_s(workload, steps=steps, world_size=world_size, out=Path(tmp) / f"bare-{i}")
            return ftbench_step_s(
                workload,
                steps=steps,
                world_size=world_size,
                host=host,
                out=Path(tmp),
                trial=2 * i + (path == "interposed"),
                interposer="always" if path == "interposed" else "auto",
            )

        paths = ["bare", "ftbench", "interposed"]
        for i in range(count):
            got = {path: run(path, i) for path in paths[i % 3 :] + paths[: i % 3]}
            found.append(Round(bare_s=got["bare"], ftbench_s=got["ftbench"], interposed_s=got["interposed"]))
    return found
