"""The results directory under stress: two harnesses on one run, a file system that
fills up mid-run, one that is read-only. Each ends in one clear line, nothing is
duplicated, and every finished trial stays readable (root: the file systems are tmpfs
mounts made for the test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.results.reader import load
from bench.results.writer import MIN_FREE, read_rows

pytestmark = pytest.mark.integ

SCENARIO = """
name = "disk"
[workload]
kind = "ddp"
world_size = 2
steps = {steps}
[recovery]
strategy = "failstop"
[measure]
trials = {trials}
deadline_s = 60
# Forked ranks where a test is about the results folder, not about how ranks start.
[launch]
start_method = "{start}"
"""
FTBENCH = [sys.executable, "-m", "bench"]


def _ftbench(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FTBENCH, *args], capture_output=True, text=True, timeout=240, check=False, **kw)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[callable]:
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited or read-only tmpfs needs root")
    mounted: list[Path] = []

    def mount(name: str, options: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "ftbench-test", str(where)], check=True)
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("ftbench: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.timeout(300)
def test_a_full_disk_ends_the_run_with_every_finished_trial_whole(tmp_path: Path, tmpfs) -> None:
    out = tmpfs("full", "size=4m")
    # Leave room for about one trial's events and rows (~200 kB) above the 1 MiB the
    # harness keeps free: the second trial fills the disk.
    ballast = os.statvfs(out).f_bavail * os.statvfs(out).f_frsize - MIN_FREE - 300_000
    (out / "ballast").write_bytes(b"\0" * ballast)
    scenario = tmp_path / "disk.toml"
    scenario.write_text(SCENARIO.format(steps=400, trials=10, start="forkserver"))
    done = _ftbench("run", str(scenario), "--out", str(out))
    assert done.returncode == 1, done.stderr
    line = _one_line(done.stderr)
    assert "No space left on device (ENOSPC)" in line and "ftbench run --resume" in line
    (run_dir,) = (out / "disk").iterdir()
    rows, torn = read_rows(run_dir / "trials.jsonl")
    assert rows and not torn  # at least one trial fitted, and none is cut
    assert len({r["trial"] for r in rows}) == len(rows)
    assert all(r["outcome"] == "completed" for r in rows)
    assert len(load(run_dir).measured()) == len(rows)


@pytest.mark.timeout(60)
def test_a_read_only_results_directory_is_one_line(tmp_path: Path, tmpfs) -> None:
    out = tmpfs("ro", "ro,size=1m")
    scenario = tmp_path / "disk.toml"
    scenario.write_text(SCENARIO.format(steps=20, trials=1, start="forkserver"))
    done = _ftbench("run", str(scenario), "--out", str(out))
    assert done.returncode == 1
    assert "Read-only file system (EROFS)" in _one_line(done.stderr)


@pytest.mark.timeout(300)
def test_a_second_harness_on_a_live_run_is_refused_and_report_reads_what_is_finished(tmp_path: Path) -> None:
    scenario = tmp_path / "disk.toml"
    # spawned ranks: the run must still be going when the report reads it
    scenario.write_text(SCENARIO.format(steps=200, trials=2, start="spawn"))
    out = tmp_path / "results"
    first = subprocess.Popen([*FTBENCH, "run", str(scenario), "--out", str(out)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = list((out / "disk").glob("*/trials.jsonl")) if (out / "disk").exists() else []
            if runs and read_rows(runs[0])[0]:
                break  # a trial is finished, others are to come
            time.sleep(0.2)
        (run_dir,) = (out / "disk").iterdir()
        second = _ftbench("run", "--resume", str(run_dir))
        assert second.returncode == 1
        assert f"pid {first.pid}" in _one_line(second.stderr)
        report = _ftbench("report", str(run_dir), "--out", str(tmp_path / "report"))
        assert report.returncode == 0, report.stderr
        assert "still being written" in report.stderr
    finally:
        first.wait(timeout=200)
    rows = read_rows(run_dir / "trials.jsonl")[0]
    assert sorted(r["trial"] for r in rows) == [0, 1]  # each trial once
    assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"
