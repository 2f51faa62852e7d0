"""A fault-free, interleaved, resource-sampled run of two stacks: the named resilience-tax
scenario at its smallest, measured for real (memory from /proc, bytes from the
namespace's interface counters)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cli.common import load_scenario
from bench.procs.launcher import ProcessHost
from bench.results.reader import load
from bench.results.tax import strategy_tax
from bench.run.runner import run
from injectors.link import system
from tests.integ.conftest import rows

pytestmark = pytest.mark.integ

SMALLEST = (
    'sweep.recovery.strategy=["failstop", "reinit"]',
    "workload.world_size=2",
    "workload.hidden=256",
    "workload.layers=1",
    "measure.trials=2",
)
"""The named resilience-tax scenario at its smallest: two stacks, two ranks of the default
MLP, two rounds (its 300 steps kept: long enough for several 0.1 s counter samples)."""


@pytest.mark.timeout(180)
def test_interleaved_tax_run_measures_memory_processes_and_wire_bytes(host: ProcessHost, tmp_path: Path) -> None:
    report = run(load_scenario("resilience-tax", SMALLEST), out=tmp_path, host=host, progress=lambda _: None)
    assert report.status == "complete"
    done = rows(report)
    # Trial 0 of both stacks before trial 1 of either.
    assert [(r["strategy"], r["trial"]) for r in done] == [
        ("failstop", 0),
        ("reinit", 0),
        ("failstop", 1),
        ("reinit", 1),
    ]
    for r in done:
        assert r["outcome"] == "completed", r
        # A rank holds at least an imported torch; the job at least its two ranks.
        assert r["rss_rank_peak_bytes"] > 50e6
        assert r["rss_job_peak_bytes"] >= 2 * 50e6
        assert r["job_procs"] >= 3  # two ranks and the store
        if system.available() is None:
            # DDP all-reduces the MLP's gradients every step: at least their size goes
            # out of some host each step (the default MLP: 17,153 float32 parameters).
            assert r["wire_bytes_per_step"] >= 17_153 * 4
    taxes = {t.strategy: t for t in strategy_tax(load(report.rundir.path))}
    assert taxes["failstop"].ratio == 1.0 and taxes["reinit"].ratio > 0
    assert taxes["reinit"].helpers.get("rank") == 2
