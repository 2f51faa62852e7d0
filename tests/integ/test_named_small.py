"""Issue 17's named scenarios, each run end to end at its smallest size: the scenario file
as shipped, shrunk with ``--set`` overrides to one stack and a few steps (the full runs
take minutes to half an hour here; docs/results.md has their figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cli.common import load_scenario
from bench.procs.launcher import ProcessHost
from bench.run.runner import run
from tests.integ.conftest import rows

pytestmark = pytest.mark.integ


def _run(name: str, sets: tuple[str, ...], host: ProcessHost, tmp_path: Path) -> list[dict[str, object]]:
    report = run(load_scenario(name, sets), out=tmp_path, host=host, progress=lambda _: None)
    assert report.status == "complete" and not report.skipped, report.skipped
    return rows(report)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_state_scaling_at_its_smallest_state(host: ProcessHost, tmp_path: Path) -> None:
    (row,) = _run(
        "state-scaling", ("workload.state_mb=0.5", 'recovery.strategy="restart"', "measure.trials=1"), host, tmp_path
    )
    assert row["outcome"] == "recovered" and row["restore_bytes"] > 0.5e6, row
    assert abs(float(row["loss_delta"])) < 1e-3


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_checkpoint_designs_torch_save_under_restart(host: ProcessHost, tmp_path: Path) -> None:
    recovery = '{ strategy = "restart", restart = { checkpoint_every = 25, checkpoint = "torch-save" } }'
    (row,) = _run("checkpoint-designs", (f"recovery={recovery}", "measure.trials=1"), host, tmp_path)
    assert row["outcome"] == "recovered" and row["checkpoint_blocked_s"] > 0 and row["restore_s"] > 0, row
