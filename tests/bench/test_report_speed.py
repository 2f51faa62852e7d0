"""Benchmarks (``make bench``), not tests: how long ``ftbench report`` takes on 1,000 and
10,000 trials with event logs (issue 22: under 10 s and under 60 s on a two-core machine).

The large runs are copies of a real one: ``ftbench run kill-one-rank`` (3 trials of each
strategy with their fault-free references, about a minute) replicated by
``tools/bigrun.py`` into 8 points (docs/results.md, "Reports of thousands of trials").
Each report is the command a user types, timed from start to exit; 1,000 trials three
times, 10,000 once. Nothing is asserted about the times (a shared machine's are noisy):
they go into ``extra_info`` with the load average they were taken at, and are printed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.pytest_plugin import store_rounds

ROOT = Path(__file__).resolve().parents[2]
FTBENCH = [sys.executable, "-m", "bench"]
#: Issue 22's bounds, printed beside the times.
TARGET_S = {1000: 10.0, 10000: 60.0}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real finished run: every figure, step and event of it the harness measured."""
    out = tmp_path_factory.mktemp("source")
    subprocess.run(
        [*FTBENCH, "run", "kill-one-rank", "--trials", "3", "--set", "measure.reference=true", "--out", str(out)],
        cwd=ROOT,
        check=True,
        timeout=900,
        stdout=subprocess.DEVNULL,
    )
    (run,) = (out / "kill-one-rank").iterdir()
    return run


@pytest.mark.timeout(1800)
@pytest.mark.parametrize(("trials", "repeats"), [(1000, 3), (10000, 1)])
def test_report_of_many_trials(benchmark, source: Path, tmp_path: Path, trials: int, repeats: int) -> None:
    big = tmp_path / f"big{trials}"
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bigrun.py"), str(source), str(big), "--trials", str(trials)],
        check=True,
        timeout=600,
        stdout=subprocess.DEVNULL,
    )
    times, loads = [], []
    for _ in range(repeats):
        loads.append(os.getloadavg()[0])
        start = time.monotonic()
        subprocess.run([*FTBENCH, "report", str(big)], cwd=ROOT, check=True, timeout=900, stdout=subprocess.DEVNULL)
        times.append(time.monotonic() - start)
    store_rounds(
        benchmark,
        times,
        {
            "unit": "s",
            "trials": trials,
            "points": 8,
            "load_average_1min": loads,
            "cpus": len(os.sched_getaffinity(0)),
            "what": "wall time of `ftbench report` on a tools/bigrun.py copy of kill-one-rank (with event logs)",
        },
    )
    print(
        f"\nreport of {trials} trials: best {min(times):.1f} s of {repeats} (target < {TARGET_S[trials]:.0f} s), "
        f"load average {', '.join(f'{x:.1f}' for x in loads)} on {os.cpu_count()} CPUs"
    )
    assert (big / "report.html").stat().st_size > 0 and len(list((big / "plots").glob("*.png"))) == 12
    shutil.rmtree(big)  # ~0.8 GB of steps.csv at 10,000 trials; pytest keeps its last temporary folders
