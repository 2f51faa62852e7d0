"""Benchmark (``make bench``): what the probe costs a job it watches.

The plain DDP example runs with and without ftbench's probe, in a rotating order
(``bench/calibrate/probe_cost.py``); pytest-benchmark records the probed runs' step
times. The paired ratio (probed over bare, time a step) and the probe's own time per
step measured in place go into ``extra_info`` and end in a verdict against the
contract: the probe's hook under 1 % of a step.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict

import pytest

from bench.calibrate.harness_cost import paired
from bench.calibrate.probe_cost import PATHS, TARGET_SHARE, rounds
from bench.pytest_plugin import store_rounds
from tests.bench.test_harness_cost import ROUNDS_ENV, _setting


@pytest.mark.timeout(1800)
def test_the_probes_cost_on_a_plain_ddp_script(benchmark) -> None:
    found = rounds(_setting(ROUNDS_ENV, "ROUNDS=N", "9", 3))
    wall, cpu = paired(found, "probe", "step_s"), paired(found, "probe", "cpu_step_s")
    hook = statistics.median(r["probe"].between_s for r in found)
    step = statistics.median(r["probe"].step_s for r in found)
    share = hook / step
    extra = {
        "unit": "s",
        "runs": [{path: asdict(r[path]) for path in PATHS} for r in found],
        "probe/bare step_s": asdict(wall),
        "probe/bare cpu_step_s": asdict(cpu),
        "hook_s_per_step": hook,
        "hook_share_of_step": share,
    }
    store_rounds(benchmark, [r["probe"].step_s for r in found], extra)
    print(
        f"\nprobe: {len(found)} rounds; probed/bare wall a step {wall.ratio:.3f} [{wall.low:.3f}, {wall.high:.3f}], "
        f"CPU a step {cpu.ratio:.3f} [{cpu.low:.3f}, {cpu.high:.3f}]; the probe's step hook "
        f"{hook * 1e6:.1f} us a step = {share:.2%} of a {step * 1e3:.2f} ms step"
    )
    verdict = "under" if share < TARGET_SHARE else "OVER"
    print(f"probe: verdict: its hook is {verdict} {TARGET_SHARE:.0%} of a step (measured in place, every rank)")
    assert not math.isnan(share)
