"""The fault-free tax of a stack against failstop, from a hand-made resilience-tax run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.report.tax import table
from bench.results import stats
from bench.results.reader import load
from bench.results.tax import strategy_tax
from tests.unit.runfactory import trial, write_run


def _fault_free(step_s: float, **extra: float) -> dict[str, object]:
    return trial(None, outcome="completed", fault="none", ff_step_s=step_s, goodput=0.9, **extra)


def _interleaved(run: Path) -> Path:
    info = json.loads((run / "run.json").read_text())
    info["scenario"]["raw"]["measure"] = {"interleave": True}
    (run / "run.json").write_text(json.dumps(info))
    return run


def _run(tmp_path: Path) -> Path:
    base = [_fault_free(s, job_procs=5, job_threads=19, rss_rank_peak_bytes=4e8) for s in (0.050, 0.051, 0.049, 0.050)]
    slow = [
        _fault_free(s, job_procs=6, job_threads=60, rss_rank_peak_bytes=4.2e8) for s in (0.060, 0.062, 0.061, 0.060)
    ]
    labels = ("strategy=failstop", "strategy=torchft")
    return _interleaved(
        write_run(
            tmp_path,
            "resilience-tax",
            dict(zip(labels, (base, slow), strict=True)),
            values={label: {"recovery.strategy": label.split("=")[1]} for label in labels},
        )
    )


def test_tax_is_the_ratio_of_medians_with_an_interval_around_it(tmp_path: Path) -> None:
    taxes = {t.strategy: t for t in strategy_tax(load(_run(tmp_path)))}
    base, ft = taxes["failstop"], taxes["torchft"]
    assert (base.ratio, base.low, base.high) == (1.0, 1.0, 1.0) and base.is_baseline
    # Paired by round (trial k against failstop's trial k): 1.2, 1.216, 1.245, 1.2.
    assert ft.paired and ft.ratio == pytest.approx(stats.median([0.060 / 0.050, 0.062 / 0.051, 0.061 / 0.049, 1.2]))
    assert ft.low <= ft.ratio <= ft.high and ft.low > 1.1  # every resample is slower
    assert ft.wall_ratio == pytest.approx(ft.ratio)  # the same goodput on both sides
    assert ft.medians["job_threads"] == 60 and math.isnan(ft.medians["wire_bytes_per_step"])
    rows = table(list(taxes.values())).set_index("stack")
    assert rows.loc["torchft", "+procs"] == "+1" and rows.loc["torchft", "+threads"] == "+41"
    assert "wire/step" not in rows  # measured nowhere: no column of dashes


def test_gpu_ranks_fill_the_device_memory_columns(tmp_path: Path) -> None:
    """On GPU ranks the tax table has the allocated and reserved peaks beside host memory;
    on the CPU (the run above) it has no column of dashes for them."""
    gpu = {"cuda_rank_peak_bytes": 2.5e8, "cuda_rank_reserved_peak_bytes": 4e8}
    labels = ("strategy=failstop", "strategy=reinit")
    run = write_run(
        tmp_path,
        "gpu-tax",
        {label: [_fault_free(0.05 + 0.001 * i, **gpu) for i in range(3)] for label in labels},
        values={label: {"recovery.strategy": label.split("=")[1]} for label in labels},
    )
    rows = table(strategy_tax(load(run))).set_index("stack")
    assert rows.loc["reinit", "GPU allocated peak"] == "250 MB"
    assert rows.loc["reinit", "GPU reserved peak"] == "400 MB"
    cpu = table(strategy_tax(load(_run(tmp_path / "cpu"))))
    assert "GPU allocated peak" not in cpu and "GPU reserved peak" not in cpu


def test_a_run_not_in_rounds_compares_the_medians(tmp_path: Path) -> None:
    labels = ("strategy=failstop", "strategy=torchft")
    base, slow = [_fault_free(s) for s in (0.05, 0.04, 0.06)], [_fault_free(s) for s in (0.07, 0.06, 0.05)]
    run = write_run(
        tmp_path,
        "resilience-tax",
        dict(zip(labels, (base, slow), strict=True)),
        values={label: {"recovery.strategy": label.split("=")[1]} for label in labels},
    )
    ft = next(t for t in strategy_tax(load(run)) if t.strategy == "torchft")
    assert not ft.paired and ft.ratio == pytest.approx(0.06 / 0.05)


def test_no_failstop_point_no_tax(tmp_path: Path) -> None:
    run = write_run(tmp_path, "resilience-tax", {"strategy=torchft": [_fault_free(0.06)]})
    assert strategy_tax(load(run)) == []


def test_median_ratio_interval_is_seeded_and_brackets_the_ratio() -> None:
    x, y = [2.0, 2.1, 1.9, 2.0, 2.2], [1.0, 1.05, 0.95, 1.0]
    a, b = stats.median_ratio_ci(x, y), stats.median_ratio_ci(x, y)
    assert (a.low, a.high) == (b.low, b.high)
    assert a.low <= 2.0 <= a.high
    assert math.isnan(stats.median_ratio_ci([], y).low)
