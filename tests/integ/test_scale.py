"""``ftbench scale`` for real, at small N: every coordinator's operations against real
clients in worker processes; nothing listens beyond loopback while it runs, and nothing
of it is left running or listening after it, Ctrl-C and SIGKILL included."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.procs.hygiene import MARKER, marked_pids
from bench.scale import rundir, spec, sweep
from bench.scale.coordinators import COORDINATORS

pytestmark = pytest.mark.integ

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = ("127.0.0.1", "[::1]", "[::ffff:127.0.0.1]")
#: Settings that keep each coordinator's operations short at N = 8.
QUICK = (
    "sizes=[8]",
    "repeats=1",
    "deadline_s=60",
    "rdzv_keep_alive_s=1",
    "rdzv_keep_alive_attempts=2",
    "lh_heartbeat_ms=200",
    "lh_heartbeat_timeout_ms=1000",
)


def listening(pids: set[int]) -> list[str]:
    """``address pid`` of every TCP or UDP socket the given processes listen on."""
    out = subprocess.run(["ss", "-ltunpH"], capture_output=True, text=True, check=False).stdout
    found = []
    for line in out.splitlines():
        for pid in (int(p) for p in re.findall(r"pid=(\d+)", line)):
            if pid in pids:
                found.append(f"{line.split()[4]} {pid}")
    return found


def beyond_loopback(sockets: list[str]) -> list[str]:
    return [s for s in sockets if not s.startswith(LOOPBACK)]


@pytest.mark.timeout(600)
def test_every_coordinator_at_small_n_on_loopback_only(tmp_path: Path) -> None:
    seen: list[str] = []

    def progress(line: str) -> None:
        # Called after each operation, while the coordinator and its participants live.
        run_id = os.environ.get(MARKER, "")
        seen.extend(listening(set(marked_pids(run_id))) if run_id else [])

    chosen = spec.build(QUICK)
    path = sweep.run(chosen, tmp_path, progress=progress)
    run = rundir.load(path)
    info = run.info
    assert info["finished"] and not info["skipped"], info["skipped"]
    assert seen, "no listening socket was seen while the coordinators ran"
    assert beyond_loopback(seen) == [], beyond_loopback(seen)
    # Every operation of every coordinator, every participant answered, with figures.
    done = run.ok()
    for name, c in COORDINATORS.items():
        for op in c.ops:
            rows = done[(done["coordinator"] == name) & (done["op"] == op.name)]
            assert len(rows) == 1, f"{name} / {op.name}: {run.records[run.records['coordinator'] == name]}"
            row = rows.iloc[0]
            assert row["done"] == (7 if op.victim else 8)
            assert 0 < row["p50_s"] <= row["p95_s"] <= row["all_s"] < 60
            assert row["sent_bytes"] > 0 and row["connections"] >= 1
    assert info["stops"] == []
    assert marked_pids(info["run_id"]) == [], "processes of the scale run outlived it"


def _started(out: Path, proc: subprocess.Popen[bytes], timeout_s: float = 180) -> tuple[Path, str]:
    """The run directory and marker of a ``ftbench scale`` subprocess, once it measured."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "ftbench scale ended before it measured anything"
        runs = list((out / "scale").glob("*/points.csv"))
        if runs:
            info = json.loads((runs[0].parent / rundir.INFO).read_text())
            return runs[0].parent, str(info["run_id"])
        time.sleep(0.2)
    raise AssertionError("no point measured in time")


def _scale(out: Path) -> subprocess.Popen[bytes]:
    sets = [
        a
        for s in ("sizes=[8, 16, 32]", "repeats=2", "coordinators=['tcpstore-libuv', 'lighthouse']")
        for a in ("--set", s)
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "bench", "scale", "--out", str(out), *sets],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _gone(run_id: str, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := marked_pids(run_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.timeout(300)
def test_ctrl_c_ends_every_process_and_keeps_the_points(tmp_path: Path) -> None:
    proc = _scale(tmp_path)
    path, run_id = _started(tmp_path, proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    assert _gone(run_id, 10) == []
    info = json.loads((path / rundir.INFO).read_text())
    assert info.get("interrupted") and not info["finished"]
    assert rundir.load(path).records.shape[0] >= 1  # what was measured is kept


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_harness_leaves_nothing_running(tmp_path: Path) -> None:
    proc = _scale(tmp_path)
    _, run_id = _started(tmp_path, proc)
    proc.kill()
    proc.wait(timeout=30)
    assert _gone(run_id, 30) == [], "the guard did not sweep the scale run"
