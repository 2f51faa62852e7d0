"""The resource sampler on real processes, and the figures it gives a trial."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.procs.hygiene import MARKER
from bench.procs.resources import Counter, Sampler
from bench.results.resources import resource_figures, roles
from tests.unit.conftest import start_in_exec

HOLD = 64 * 1024 * 1024


@pytest.fixture
def holder() -> subprocess.Popen[bytes]:
    """A process of run ``t-res`` that touches 64 MiB and waits."""
    code = f"import sys, time; b = bytearray({HOLD}); print('ready', flush=True); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code], env=os.environ | {MARKER: "t-res"}, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    yield proc
    proc.kill()
    proc.wait()


def test_sampler_sees_the_runs_processes_and_their_peaks(holder: subprocess.Popen[bytes]) -> None:
    sampler = Sampler(run_id="t-res", exclude=set)
    sampler.sample()
    seen = sampler.stop()
    proc = seen["procs"][str(holder.pid)]
    assert proc["hwm"] >= HOLD
    assert proc["ppid"] == os.getpid()
    assert proc["threads"] >= 1
    assert seen["job_rss_peak"] >= HOLD and seen["procs_peak"] == 1


def test_sampler_leaves_out_what_it_is_told_to_and_other_runs(holder: subprocess.Popen[bytes]) -> None:
    assert Sampler(run_id="t-other", exclude=set).stop()["procs"] == {}
    sampler = Sampler(run_id="t-res", exclude=lambda: {holder.pid})
    sampler.sample()
    assert sampler.stop()["procs"] == {}


def test_sampler_thread_samples_until_stopped(holder: subprocess.Popen[bytes]) -> None:
    sampler = Sampler(run_id="t-res", exclude=set, interval_s=0.02)
    sampler.start()
    time.sleep(0.2)
    seen = sampler.stop()
    assert seen["samples"] >= 3


def test_counter_reads_the_transmit_bytes_of_its_interface(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.write_text(
        "Inter-|   Receive                                                |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls\n"
        "    lo:    1604       2    0    0    0     0          0         0     1700       2    0    0    0     0\n"
        "  eth0:  900000      20    0    0    0     0          0         0   123456      12    0    0    0     0\n"
    )
    fd = os.open(dev, os.O_RDONLY)
    try:
        assert Counter("h0", fd, "eth0").tx_bytes() == 123456
        assert Counter("h0", fd, "lo").tx_bytes() == 1700
        assert Counter("h0", fd, "eth1").tx_bytes() is None
    finally:
        os.close(fd)


def _trial(wire: list[tuple[int, int]], *, inject_at: int | None = None) -> list[dict[str, object]]:
    """Two ranks (pids 10, 11) ending steps 1-10 every 100 ms, a store (pid 20) and a
    monitor forked from rank 0 (pid 30)."""
    ms = 1_000_000
    events: list[dict[str, object]] = [
        {"t": 0, "event": "proc_start", "src": "rank", "rank": r, "pid": 10 + r} for r in (0, 1)
    ]
    events.append({"t": 0, "event": "store_ready", "src": "store", "pid": 20})
    for step in range(1, 11):
        for r in (0, 1):
            events.append(
                {"t": step * 100 * ms + r, "event": "step_end", "src": "rank", "rank": r, "pid": 10 + r, "step": step}
            )
    if inject_at is not None:
        events.append({"t": inject_at * ms, "event": "inject", "src": "harness"})
    procs = {
        "10": {"name": "python", "ppid": 1, "hwm": 300, "threads": 4},
        "11": {"name": "python", "ppid": 1, "hwm": 350, "threads": 4},
        "20": {"name": "python", "ppid": 1, "hwm": 900, "threads": 2},
        "30": {"name": "python", "ppid": 10, "hwm": 100, "threads": 1},
    }
    events.append(
        {
            "t": 2000 * ms,
            "event": "resources",
            "src": "harness",
            "procs": procs,
            "job_rss_peak": 1500,
            "procs_peak": 4,
            "threads_peak": 11,
            "wire": wire,
        }
    )
    return events


def test_figures_of_a_sampled_trial() -> None:
    ms = 1_000_000
    # 1000 bytes per 100 ms, sampled every 50 ms: one step's worth per step.
    wire = [(t * ms, t * 10) for t in range(0, 1200, 50)]
    fig = resource_figures(_trial(wire), warmup_steps=2)
    assert fig["rss_rank_peak_bytes"] == 350  # ranks only: the store's 900 is the job's
    assert fig["rss_job_peak_bytes"] == 1500
    assert (fig["job_procs"], fig["job_threads"]) == (4, 11)
    assert fig["wire_bytes_per_step"] == pytest.approx(1000)
    assert math.isnan(fig["cuda_rank_peak_bytes"]) and math.isnan(fig["cuda_rank_reserved_peak_bytes"])


def test_gpu_ranks_report_their_device_memory_peaks() -> None:
    """The largest rank's allocated and reserved peaks, from train_end, sampled or not."""
    ms = 1_000_000
    ends = [
        {"t": 1100 * ms, "event": "train_end", "src": "rank", "rank": r, "pid": 10 + r, "step": 10, **peaks}
        for r, peaks in enumerate(
            (
                {"cuda_peak_bytes": 3e8, "cuda_reserved_peak_bytes": 5e8},
                {"cuda_peak_bytes": 4e8, "cuda_reserved_peak_bytes": 4.5e8},
            )
        )
    ]
    unsampled = [e for e in _trial([]) if e["event"] not in ("resources", "train_end")] + ends
    fig = resource_figures(unsampled, warmup_steps=0)
    assert (fig["cuda_rank_peak_bytes"], fig["cuda_rank_reserved_peak_bytes"]) == (4e8, 5e8)


def test_wire_bytes_only_before_the_injection() -> None:
    ms = 1_000_000
    # Quiet until 600 ms, then a burst: steps 7-10 come after an injection at 650 ms.
    wire = [(t * ms, t * 10 if t <= 600 else 10**9) for t in range(0, 1200, 50)]
    assert resource_figures(_trial(wire, inject_at=650), warmup_steps=2)["wire_bytes_per_step"] == pytest.approx(1000)


def test_no_sampling_no_figures_and_too_short_a_window_no_wire() -> None:
    events = [e for e in _trial([]) if e["event"] != "resources"]
    assert all(math.isnan(v) for v in resource_figures(events, warmup_steps=0).values())
    ms = 1_000_000
    assert math.isnan(resource_figures(_trial([(150 * ms, 0)]), warmup_steps=0)["wire_bytes_per_step"])


def test_processes_are_named_by_what_they_log_or_by_their_parent() -> None:
    assert roles(_trial([])) == {"rank": 2, "store": 1, "rank's child": 1}


@pytest.mark.timeout(120)
def test_sampler_counts_a_process_sampled_inside_its_exec() -> None:
    """A process first sampled inside ``execve(2)`` (no environment to read yet) is read
    again, not remembered as another run's."""
    for _ in range(5):
        child = start_in_exec("t-res")
        try:
            sampler = Sampler(run_id="t-res", exclude=set)
            sampler.sample()  # inside the exec: no environment to read yet
            deadline = time.monotonic() + 10
            while child.pid not in sampler.procs and time.monotonic() < deadline:
                time.sleep(0.02)
                sampler.sample()
            assert str(child.pid) in sampler.stop()["procs"]
        finally:
            child.kill()
            child.wait()
