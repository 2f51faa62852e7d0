"""What a hostile local user could do to a root harness, each tried for real."""

from __future__ import annotations

import json
import os
import pickle
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.runfactory import trial, write_run

pytestmark = pytest.mark.integ
ROOT = Path(__file__).resolve().parents[2]


def ftbench(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})),
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the attack is another user planting records for root")
def test_undo_records_planted_by_another_user_are_never_run(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    state = tmp_path / "state"
    run = state / "deadbeef"
    run.mkdir(parents=True)
    marker = tmp_path / "pwned"
    (run / "evil.json").write_text(json.dumps({"what": "x", "commands": [["touch", str(marker)]]}))
    for p in (state, run, run / "evil.json"):
        os.chown(p, nobody, nobody)
        p.chmod(0o777 if p.is_dir() else 0o666)
    done = ftbench("cleanup", env={"FTBENCH_STATE_DIR": str(state)})
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), "a record planted by another user was run as root"
    # A record of ours whose command is not an injector's tool is refused too.
    os.chown(state, 0, 0)
    state.chmod(0o700)
    mine = state / "cafe"
    mine.mkdir(mode=0o700)
    record = mine / "odd.json"
    record.write_text(json.dumps({"what": "y", "commands": [["touch", str(marker)]]}))
    record.chmod(0o600)
    done = ftbench("cleanup", env={"FTBENCH_STATE_DIR": str(state)})
    assert not marker.exists() and "not a program undo records may run" in done.stdout, done.stdout


def test_a_baseline_name_cannot_escape_its_folder(tmp_path: Path) -> None:
    run = write_run(tmp_path / "results", "s", {"s": [trial(0.01, 0.03)] * 3})
    victim = tmp_path / "baselines" / ".." / "victim"
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "keep").write_text("precious")
    done = ftbench("baseline", str(run), "--name", "../victim", "--dir", str(tmp_path / "baselines"))
    assert done.returncode == 2 and "--name" in done.stderr, done.stderr
    assert (tmp_path / "victim" / "keep").read_text() == "precious" and victim.resolve().exists()
    info = json.loads((run / "run.json").read_text())
    info["scenario"]["name"] = "../victim"
    (run / "run.json").write_text(json.dumps(info))
    done = ftbench("baseline", str(run), "--dir", str(tmp_path / "baselines"))
    assert done.returncode == 2 and (tmp_path / "victim" / "keep").exists(), done.stderr


def test_a_ranks_spec_file_is_data_never_code(tmp_path: Path) -> None:
    """torchrun's workers read their spec from the results folder: a pickle planted there
    (which would run code when unpickled) is refused as malformed JSON."""
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    planted = tmp_path / "spec.json"
    planted.write_bytes(pickle.dumps(Evil()))
    done = subprocess.run(
        [sys.executable, "-m", "bench.rank.entry", str(planted)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=dict(os.environ, RANK="0", PYTHONPATH=str(ROOT)),
    )
    assert done.returncode != 0 and not marker.exists()
