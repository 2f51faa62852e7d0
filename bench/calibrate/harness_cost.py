"""What ftbench costs a workload: fault-free step time through ftbench against the bare loop.

One *round* runs the same fault-free workload three ways, back to back in a rotating
order: the bare loop, ftbench's stock path (nothing of ftbench in the collectives) and
ftbench with the thin fault interposer in the collective path (``launch.interposer =
"always"``: what a rank-side fault costs before it fires). Each run is reduced to two
figures: the median step time over every rank's steps after the warm-up, and the CPU
time the ranks spent per step (every thread of every rank, over all their steps).

The ratios are paired: each round's ftbench run over the same round's bare run, so
that the machine's load, which drifts from minute to minute on shared cores, cancels;
the figure is the median of the rounds' ratios with a bootstrap 95 % interval. Wall
time carries the harness's own process (it shares the cores with the ranks); CPU time
per step leaves it out and carries only what ftbench adds inside a rank (event writes,
hooks, its collectives' wrapper). Both spread about as much from round to round on
shared cores (four ranks on two cores spend CPU on the contention itself), so neither
is resolved beyond what the rounds allow (docs/calibration.md has the widths).
``tests/bench/test_harness_cost.py`` records the rounds with pytest-benchmark (``make
bench``).
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.calibrate.bare import start_bare
from bench.calibrate.reference import READY_TIMEOUT_S
from bench.procs.hygiene import kill_all
from bench.procs.launcher import ProcessHost
from bench.procs.store import bound_store
from bench.results import stats
from bench.results.writer import RunDir
from bench.run.runner import context
from bench.run.trial import run_trial
from bench.scenario.loader import parse, points

STEPS_LEFT_OUT = 20
"""Leading steps of every rank left out of the medians, on both paths."""


PATHS = ("bare", "ftbench", "interposed")

TARGET_WIDTH = 0.02
"""The width of the 95 % interval of ftbench's wall-time ratio (``ftbench`` over
``bare``, ``step_s``) at which the benchmark counts the harness's cost as resolved."""
TARGET_RATIO = 1.02
"""The most ftbench may cost a fault-free step: its wall-time ratio over the bare loop."""


@dataclass(frozen=True, slots=True)
class Measured:
    """One fault-free run of one path."""

    step_s: float
    """Median step time over every rank's steps after the warm-up."""
    cpu_step_s: float
    """CPU time of all ranks (every thread) per step, over all their steps."""
    harness_cpu_share: float = math.nan
    """ftbench's harness process: its CPU time over the trial's wall time (its start,
    its driver loop and its teardown; NaN for the bare loop, which has none)."""
    between_s: float = math.nan
    """ftbench's own code in a rank between two steps (the step event and the fail-stop
    policy), wall time per step, the mean over the ranks (NaN for the bare loop)."""


Round = dict[str, Measured]
"""A round: each path's run, by path."""


@dataclass(frozen=True, slots=True)
class Ratio:
    """A path against the bare loop: the median of the rounds' paired ratios."""

    ratio: float
    low: float
    high: float
    """The bootstrap 95 % interval of that median."""

    @property
    def width(self) -> float:
        return self.high - self.low


def paired(found: list[Round], path: str, figure: str) -> Ratio:
    """``path`` over the bare loop for ``figure`` (``step_s`` or ``cpu_step_s``)."""
    ratios = [getattr(r[path], figure) / getattr(r["bare"], figure) for r in found]
    ci = stats.bootstrap_median_ci(ratios)
    return Ratio(stats.median(ratios), ci.low, ci.high)


def resolved(found: list[Round], width: float = TARGET_WIDTH) -> bool:
    """Whether ftbench's wall-time ratio is known to within ``width`` (95 %)."""
    return paired(found, "ftbench", "step_s").width <= width


def rounds_to_resolve(found: list[Round], width: float = TARGET_WIDTH) -> int:
    """About how many rounds would narrow the wall-time ratio's interval to ``width``,
    at the spread these rounds show: an interval narrows as one over the square root of
    the rounds, so this is a projection, not a promise (the spread itself is estimated)."""
    now = paired(found, "ftbench", "step_s").width
    if math.isnan(now):
        return 0
    return max(len(found), math.ceil(len(found) * (now / width) ** 2))


def keep_going(found: list[Round], *, count: int, budget_s: float, spent_s: float, width: float = TARGET_WIDTH) -> bool:
    """Whether to run another round: always until ``count``, then while the interval is
    wider than ``width`` and another round, as long as the average one so far, still
    ends within ``budget_s`` of the first round's start. Stopping on a narrow interval
    can stop on a lucky one; ``count`` rounds first keeps that from happening early."""
    if len(found) < count:
        return True
    if resolved(found, width):
        return False
    return spent_s + spent_s / len(found) <= budget_s


def ftbench_run(
    workload: str, *, steps: int, world_size: int, host: ProcessHost, out: Path, trial: int, interposer: str = "auto"
) -> Measured:
    """A fault-free fail-stop trial (plain torch.distributed)."""
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
    ranks = [e for e in result.events if e.get("src") == "rank" and e["event"] in ("train_start", "train_end")]
    cpu = sum(float(e["cpu_s"]) * (1 if e["event"] == "train_end" else -1) for e in ranks)
    between = [float(e["between_s"]) for e in ranks if e["event"] == "train_end"]
    trial_span = [e for e in result.events if e.get("src") == "harness" and e["event"] in ("trial_start", "trial_end")]
    first, last = trial_span[0], trial_span[-1]
    harness = (float(last["cpu_s"]) - float(first["cpu_s"])) / ((last["t"] - first["t"]) / 1e9)
    return Measured(
        step_s=result.facts.ff_step_s,
        cpu_step_s=cpu / steps,
        harness_cpu_share=harness,
        between_s=statistics.fmean(between) / steps,
    )


def bare_run(workload: str, *, steps: int, world_size: int, out: Path) -> Measured:
    """The bare loop's run."""
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
    return Measured(
        step_s=statistics.median(float(s) for d in done for s in d["step_s"][STEPS_LEFT_OUT:]),
        cpu_step_s=sum(float(d["cpu_s"]) for d in done) / steps,
    )


def rounds(workload: str, *, count: int, budget_s: float = 0.0, steps: int = 1000, world_size: int = 4) -> list[Round]:
    """Rounds of the three fault-free runs, in a rotating order: ``count`` of them, then
    more while :func:`keep_going` says so."""
    found: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="ftbench-cost-") as tmp, ProcessHost() as host:

        def run(path: str, i: int) -> Measured:
            if path == "bare":
                return bare_run(workload, steps=steps, world_size=world_size, out=Path(tmp) / f"bare-{i}")
            return ftbench_run(
                workload,
                steps=steps,
                world_size=world_size,
                host=host,
                out=Path(tmp),
                trial=2 * i + (path == "interposed"),
                interposer="always" if path == "interposed" else "auto",
            )

        start = time.monotonic()
        while keep_going(found, count=count, budget_s=budget_s, spent_s=time.monotonic() - start):
            i = len(found)
            order = PATHS[i % 3 :] + PATHS[: i % 3]
            found.append({path: run(path, i) for path in order})
    return found
