"""Benchmarks (``make bench``), not tests: what ftbench costs a fault-free workload.

Each round runs the same fault-free workload through the bare loop
(``bench/calibrate/bare_rank.py``), through ftbench's stock fail-stop path, and through
ftbench with the fault interposer in the collective path, in a rotating order
(``bench/calibrate/harness_cost.py``). pytest-benchmark records ftbench's median step
time of each round as the benchmark's rounds; every run's figures and the paired
ratios with their intervals go into ``extra_info``. Nothing is asserted about the
ratios: they are measurements, reported in docs/calibration.md.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import asdict

import pytest

from bench.calibrate.harness_cost import PATHS, paired, rounds
from bench.pytest_plugin import store_rounds

ROUNDS_ENV = "FTBENCH_COST_ROUNDS"
"""More rounds than the default narrow the intervals (``make bench ROUNDS=40``): a run's
step time varies 2-2.5 % from run to run on two shared cores, and only more runs average
that out (docs/calibration.md)."""


def _rounds() -> int:
    text = os.environ.get(ROUNDS_ENV, "9")
    if not text.isdigit() or int(text) < 3:
        pytest.exit(
            f"{ROUNDS_ENV} (make bench ROUNDS=N): expected an integer of at least 3, got {text!r}", returncode=2
        )
    return int(text)


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("workload", ["allreduce", "ddp"])
def test_fault_free_step_time_ftbench_over_bare(benchmark, workload: str) -> None:
    count = _rounds()
    found = rounds(workload, count=count)
    ratios = {
        f"{path}/bare {figure}": asdict(paired(found, path, figure))
        for path in ("ftbench", "interposed")
        for figure in ("cpu_step_s", "step_s")
    }
    harness = statistics.median(r["ftbench"].harness_cpu_share for r in found)
    between = statistics.median(r["ftbench"].between_s for r in found)
    step = statistics.median(r["ftbench"].step_s for r in found)
    extra = {
        "unit": "s",
        "workload": workload,
        "runs": [{path: asdict(r[path]) for path in PATHS} for r in found],
        "paired_ratios": ratios,
        "harness_cpu_share": harness,
        "between_steps_s": between,
        "what": "4 gloo ranks, 1000 steps; step_s: median over every rank's steps after 20 warm-up steps; "
        "cpu_step_s: every rank's CPU time per step; ratios: median of the rounds' paired ratios, bootstrap 95 %",
    }
    store_rounds(benchmark, [r["ftbench"].step_s for r in found], extra)
    print(f"\n{workload}: ftbench over the bare loop, median of {count} paired rounds [95 %]")
    for name, r in ratios.items():
        print(f"  {name:<26} {r['ratio']:.4f} [{r['low']:.4f}, {r['high']:.4f}]  width {r['high'] - r['low']:.4f}")
    print(f"  harness process: {harness:.1%} of a core over the trial (start, driver loop, teardown)")
    print(
        f"  in each rank between steps (step event, policy): {between * 1e6:.1f} us a step, "
        f"{between / step:.2%} of a step"
    )
    assert all(m.step_s > 0 and m.cpu_step_s > 0 for r in found for m in r.values())
