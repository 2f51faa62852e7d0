"""Integration tests: real processes, real process groups, real signals.

One :class:`ProcessHost` (guard + forkserver) serves the whole session, as it serves a
whole ``ftbench run``; every test checks that its trials left no process behind.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.procs import guard
from bench.procs.hygiene import marked_pids
from bench.procs.launcher import ProcessHost
from bench.run.runner import RunReport, run
from bench.scenario.loader import load


@pytest.fixture(scope="session")
def host() -> Iterator[ProcessHost]:
    with ProcessHost() as h:
        yield h
    assert marked_pids(h.run_id) == [], "processes of the run outlived ProcessHost.close()"


@pytest.fixture
def run_scenario(host: ProcessHost, tmp_path: Path, write_scenario) -> Callable[..., RunReport]:
    """Run a scenario text for real; assert that only the run's infrastructure survives it."""

    def go(text: str, **kw: Any) -> RunReport:
        report = run(load(write_scenario(text)), out=tmp_path / "results", host=host, progress=lambda _: None, **kw)
        leftovers = set(marked_pids(host.run_id)) - host.infrastructure()
        assert not leftovers, f"processes left after the run: {describe(leftovers)}"
        return report

    return go


def describe(pids: set[int]) -> list[str]:
    """``pid: command line`` of each process, for a failure message that names the culprit."""
    out = []
    for pid in sorted(pids):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "(gone)"
        out.append(f"{pid}: {cmd}")
    return out


def rows(report: RunReport) -> list[dict[str, Any]]:
    return [r for r in report.rundir.rows() if not r["reference"]]


def at_timeout(ttd_s: float, timeout_s: float) -> bool:
    """Whether a detection came at a process-group timeout of ``timeout_s``: not before
    it by more than a step (the peers' timeout runs from when they entered the
    collective that never completes, which can be up to a step before the harness
    stamped the injection: tens of milliseconds on loaded cores), nor a second after."""
    return timeout_s - 0.2 <= ttd_s < timeout_s + 1.0


def run_of(harness: subprocess.Popen[bytes] | subprocess.Popen[str]) -> str | None:
    """The run id of a CLI harness, read from its guard's command line: the test then
    watches that run's processes only, not whatever else runs on the machine."""
    return next((run for run, pid in guard.running().items() if pid == harness.pid), None)
