"""``oom`` and ``storage``: what validation refuses and why, and the cgroup and tmpfs
helpers on this machine's own kernel (those need root, and are skipped without it)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench.procs.oom import kernel_offset_ns, oom_records
from bench.procs.trialmachine import TrialMachine
from bench.results.derive import fault_figures
from bench.scenario.config import ConfigError
from bench.scenario.loader import parse
from injectors import cgroup, storage, undo
from injectors.base import Target


def raw(kind: str, **extra: Any) -> dict[str, Any]:
    knobs = {"duration_s": 5} | ({"size_mb": 8} if kind == "storage" else {})
    return {
        "name": "m",
        "workload": {"kind": "ddp", "world_size": 2, "steps": 100},
        "faults": [{"kind": kind, **knobs, "target": {"ranks": [1]}, "trigger": {"at_step": 20}}],
        "measure": {"deadline_s": 60},
    } | extra


@pytest.fixture
def fresh_probes() -> Any:
    """The machine probes are cached per process: each test asks afresh."""
    cgroup.unavailable.cache_clear()
    storage.unavailable.cache_clear()
    yield
    cgroup.unavailable.cache_clear()
    storage.unavailable.cache_clear()


@pytest.mark.parametrize("kind", ["oom", "storage"])
def test_a_machine_fault_is_refused_under_host_agents(kind: str) -> None:
    scenario = raw(kind, launch={"agents": True})
    scenario["faults"][0]["target"] = {"host": 1}
    with pytest.raises(ConfigError, match=rf"faults\.0\.kind: expected a fault other than '{kind}' with launch.agents"):
        parse(scenario, file="m.toml")


@pytest.mark.parametrize(("kind", "needs"), [("oom", "memory cgroups need root"), ("storage", "needs root")])
def test_a_machine_fault_is_refused_without_root(
    kind: str, needs: str, monkeypatch: pytest.MonkeyPatch, fresh_probes: None
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ConfigError, match=r"m.toml: faults\.0\.kind: expected a fault kind this machine can") as err:
        parse(raw(kind), file="m.toml")
    assert needs in str(err.value) and "uid 1000" in str(err.value), err.value


def test_oom_is_refused_without_a_memory_cgroup_hierarchy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_probes: None
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(cgroup, "ROOT", tmp_path)  # a cgroup mount with neither v1's nor v2's memory files
    with pytest.raises(ConfigError, match="no memory cgroup hierarchy under"):
        parse(raw("oom"), file="m.toml")


def test_a_full_file_system_that_outlasts_the_deadline_is_refused() -> None:
    scenario = raw("storage")
    scenario["faults"][0]["duration_s"] = 60
    with pytest.raises(ConfigError, match=r"faults\.0\.duration_s: expected a fault that is over before"):
        parse(scenario, file="m.toml")


@pytest.mark.parametrize("path", ["/tmp/ftb-x", "/sys/fs/cgroup/memory/not-ours", "/sys/fs/cgroup/../etc/ftb-x"])
def test_a_rank_joins_only_a_group_ftbench_made(path: str) -> None:
    with pytest.raises(ValueError, match="expected a group ftbench created"):
        cgroup.join(path, 0)
    assert cgroup.remove_tree(Path(path))[0].endswith("not a group ftbench created; left alone")


def _need(why: str | None) -> None:
    if why:
        pytest.skip(why)


ALLOCATES = (
    "import sys, time; from injectors.cgroup import join; join(sys.argv[1], 1); print('in', flush=True); "
    "chunks = []\n"
    "while True:\n"
    "    chunks.append(bytearray(1 << 20)); chunks = chunks[-50:]; time.sleep(0.005)"
)


# Slow set: on a loaded machine the kernel kept the OOM-killed, reaped process listed in
# its v1 group past remove_tree's 10 s (CI, stop 26), leaving the group for the next test.
# The default run keeps the oom fault end to end (tests/integ/test_machine_faults.py).
@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_rank_in_its_own_group_is_ended_by_the_oom_killer_and_the_groups_go(tmp_path: Path) -> None:
    _need(cgroup.unavailable())
    parent = cgroup.create_parent(f"test-{os.getpid()}")
    try:
        root = str(Path(cgroup.__file__).resolve().parents[1])
        proc = subprocess.Popen(
            [sys.executable, "-c", ALLOCATES, str(parent)],
            stdout=subprocess.PIPE,
            env=os.environ | {"PYTHONPATH": root},
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"in"
        h = cgroup.hierarchy()
        assert h is not None and h.own(proc.pid).parent == parent
        since = time.monotonic_ns()
        oom = cgroup.Oom(duration_s=20)
        detail = oom.inject(Target(ranks=[1], pids=[proc.pid]))
        assert detail["mechanism"].startswith(f"memory cgroup v{h.version} limit")
        assert proc.wait(timeout=20) == -signal.SIGKILL
        stamp, message = oom_records([proc.pid], since_ns=since)[proc.pid]
        assert "out of memory: killed process" in message.lower(), message
        # the kernel's stamp of the kill, on our clock: after the limit was set, before the exit was seen
        offset = kernel_offset_ns()
        assert offset is not None
        assert since <= stamp + offset <= time.monotonic_ns(), (since, stamp, offset)
        oom.undo()
        oom.undo()  # idempotent
        assert oom.report["survived"] == []
    finally:
        assert cgroup.remove_tree(parent) == []
    assert not parent.exists()


def test_a_filled_file_system_refuses_writes_until_the_fault_is_undone(tmp_path: Path) -> None:
    _need(storage.unavailable())
    volume = storage.Volume(tmp_path / "ckpt", 4 << 20)
    volume.mount()
    try:
        assert storage.mounted(volume.path)
        fill = storage.Fill(duration_s=1, size_mb=4, leave_mb=0)
        detail = fill.inject(Target(ranks=[0], pids=[os.getpid()]))
        assert detail["free_bytes"] == 0 and detail["filled_bytes"] > (3 << 20)
        with pytest.raises(OSError) as err, open(volume.path / "save", "wb") as fh:
            fh.write(b"x" * 8192)
            fh.flush()
        assert err.value.errno == errno.ENOSPC
        fill.undo()
        (volume.path / "save").write_bytes(b"x" * 8192)
    finally:
        assert volume.close() == ""
    assert not storage.mounted(volume.path)


def test_overlapping_fills_keep_the_file_system_full_until_the_last_ends(tmp_path: Path) -> None:
    _need(storage.unavailable())
    volume = storage.Volume(tmp_path / "ckpt", 4 << 20)
    volume.mount()
    try:
        first, second = (storage.Fill(duration_s=1, size_mb=4, leave_mb=0) for _ in range(2))
        first.inject(Target(ranks=[0], pids=[os.getpid()]))
        assert second.inject(Target(ranks=[0], pids=[os.getpid()]))["filled_bytes"] == 0
        first.undo()
        assert volume.free_bytes() == 0, "the second firing still holds"
        second.undo()
        assert volume.free_bytes() > (3 << 20) and volume.fills == []
        first.undo()  # idempotent
    finally:
        assert volume.close() == ""


def _scenario_of(kinds: list[str]) -> Any:
    s = raw(kinds[0])
    s["faults"] = [raw(k)["faults"][0] for k in kinds]
    return parse(s, file="m.toml")


@pytest.mark.slow  # its group name is the previous test's: a group left by that one makes it fail
def test_a_harness_that_dies_mid_trial_leaves_undo_records_that_remove_the_set_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _need(cgroup.unavailable() or storage.unavailable())
    monkeypatch.setenv("FTBENCH_STATE_DIR", str(tmp_path / "state"))
    run = f"t{os.getpid()}"
    machine = TrialMachine.set_up(
        _scenario_of(["oom", "storage"]), run_id=run, name=f"test-{os.getpid()}", checkpoint_dir=tmp_path / "ckpt"
    )
    assert machine.cgroup is not None and machine.cgroup.is_dir()
    assert machine.volume is not None and storage.mounted(machine.volume.path)
    assert len(undo.pending(run)) == 2
    report = undo.undo_all(run)  # what the guard runs when the harness is gone
    assert report.problems == [] and len(report.reverted) == 2
    assert not machine.cgroup.exists() and not storage.mounted(tmp_path / "ckpt")


def test_a_trial_that_ends_removes_its_set_up_and_its_undo_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _need(cgroup.unavailable() or storage.unavailable())
    monkeypatch.setenv("FTBENCH_STATE_DIR", str(tmp_path / "state"))
    run = f"t{os.getpid()}"
    machine = TrialMachine.set_up(
        _scenario_of(["storage", "oom"]), run_id=run, name=f"test2-{os.getpid()}", checkpoint_dir=tmp_path / "ckpt"
    )
    group = machine.cgroup
    described = machine.describe()
    assert described["checkpoint_fs_bytes"] == 8 << 20 and described["memory_cgroup"] == str(group)
    assert machine.close() == [] and machine.close() == []
    assert group is not None and not group.exists() and not storage.mounted(tmp_path / "ckpt")
    assert undo.pending(run) == []


def test_the_kernel_clock_offset_is_measured_not_assumed() -> None:
    _need(None if os.geteuid() == 0 and os.path.exists("/dev/kmsg") else "/dev/kmsg needs root")
    a, b = kernel_offset_ns(), kernel_offset_ns()
    assert a is not None and b is not None and abs(a - b) < 1_000_000, (a, b)


def test_an_oom_fault_counts_from_the_kill_not_from_the_limit() -> None:
    s = 1_000_000_000
    events = [
        {"t": 1 * s, "event": "inject", "src": "harness", "fault": 0, "kind": "oom", "ranks": [1], "pids": [99]},
        {"t": 4 * s, "event": "detect", "src": "rank", "rank": 0, "pid": 98, "how": "peer_closed", "site": "backward"},
        {"t": 5 * s, "event": "oom_kill", "src": "harness", "rank": 1, "pid": 99, "t_kill": 3 * s, "message": "m"},
        {"t": 6 * s, "event": "trial_end", "src": "harness", "outcome": "ended"},
    ]
    (row,) = fault_figures(events, faults=[("oom", "1")], steps=10, warmup_steps=0, phases=())
    assert row.figures["ttd_s"] == pytest.approx(1.0)  # the detection 1 s after the kill, 3 s after the limit
    survived = [e for e in events if e["event"] != "oom_kill"]
    (row,) = fault_figures(survived, faults=[("oom", "1")], steps=10, warmup_steps=0, phases=())
    assert row.figures["ttd_s"] == pytest.approx(3.0)
