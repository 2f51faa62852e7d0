"""Benchmarks (``make bench``), not tests: what ftbench costs a fault-free workload.

Each round runs the same fault-free workload through the bare loop
(``bench/calibrate/bare_rank.py``), through ftbench's stock fail-stop path, and through
ftbench with the fault interposer in the collective path, in a rotating order.
pytest-benchmark records ftbench's median step time of each round as the benchmark's
rounds; the other medians and the ratios of the medians of the medians go into
``extra_info``. Nothing is asserted about the ratios: they are measurements, reported
in the README.
"""

from __future__ import annotations

import statistics

import pytest

from bench.calibrate.harness_cost import rounds
from bench.pytest_plugin import store_rounds

ROUNDS = 9


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("workload", ["allreduce", "ddp"])
def test_fault_free_step_time_ftbench_over_bare(benchmark, workload: str) -> None:
    found = rounds(workload, count=ROUNDS)
    bare = [r.bare_s for r in found]
    ftb = [r.ftbench_s for r in found]
    interposed = [r.interposed_s for r in found]
    ratio = statistics.median(ftb) / statistics.median(bare)
    ratio_interposed = statistics.median(interposed) / statistics.median(bare)
    extra = {
        "unit": "s",
        "workload": workload,
        "bare_medians_s": bare,
        "ftbench_medians_s": ftb,
        "interposed_medians_s": interposed,
        "ratio_of_medians": ratio,
        "interposed_ratio_of_medians": ratio_interposed,
        "what": "median step time over every rank's steps after 20 warm-up steps, 4 gloo ranks, 1000 steps",
    }
    store_rounds(benchmark, ftb, extra)
    print(
        f"\n{workload}: bare {statistics.median(bare) * 1e3:.3f} ms, ftbench {statistics.median(ftb) * 1e3:.3f} "
        f"ms (ratio {ratio:.4f}), with the interposer {statistics.median(interposed) * 1e3:.3f} ms "
        f"(ratio {ratio_interposed:.4f}) per step"
    )
    assert all(v > 0 for v in bare + ftb + interposed)
