"""``ftbench cleanup --envs``: the cache listed with sizes and last use, removal on
request, and environments that are in use or being built kept."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.procs import envcache
from bench.procs.venvs import USED_STAMP


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "envs"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("FTBENCH_ENV_DIR", str(root))
    return root


def _env(root: Path, name: str, spec: str, size: int, used: float) -> Path:
    path = root / name
    (path / "bin").mkdir(parents=True)
    (path / "ftbench-env.json").write_text(json.dumps({"spec": spec}))
    (path / "blob").write_bytes(os.urandom(size))
    (path / USED_STAMP).touch()
    os.utime(path / USED_STAMP, (used, used))
    return path


def test_listing_is_most_recently_used_first_with_sizes(cache: Path) -> None:
    _env(cache, "a", "torch==2.14.1", 300_000, used=1_000)
    _env(cache, "b", "torch==2.15.0", 100_000, used=2_000)
    found = envcache.listing()
    assert [e.spec for e in found] == ["torch==2.15.0", "torch==2.14.1"]
    assert found[1].size_bytes >= 300_000 and found[1].last_used == 1_000
    out = CliRunner().invoke(cli, ["cleanup", "--envs"])
    assert out.exit_code == 0 and "torch==2.15.0" in out.output and "2 environment(s)" in out.output


def test_remove_by_spec_or_all(cache: Path) -> None:
    a = _env(cache, "a", "torch==2.14.1", 1000, used=1_000)
    b = _env(cache, "b", "torch==2.15.0", 1000, used=2_000)
    out = CliRunner().invoke(cli, ["cleanup", "--remove-env", "torch==2.14.1"])
    assert out.exit_code == 0 and "removed torch==2.14.1" in out.output
    assert not a.exists() and b.exists()
    out = CliRunner().invoke(cli, ["cleanup", "--remove-env", "torch==9.9"])
    assert out.exit_code == 2 and "--remove-env" in out.stderr
    assert CliRunner().invoke(cli, ["cleanup", "--remove-env", "all"]).exit_code == 0
    assert not b.exists()


def test_an_environment_in_use_or_being_built_is_kept(cache: Path) -> None:
    used = _env(cache, "a", "torch==2.14.1", 1000, used=1_000)
    shutil.copy("/bin/sleep", used / "bin" / "sleep")
    proc = subprocess.Popen([str(used / "bin" / "sleep"), "30"])
    try:
        out = CliRunner().invoke(cli, ["cleanup", "--remove-env", "all"])
        assert f"in use by pid {proc.pid}" in out.stderr and used.exists()
    finally:
        proc.kill()
        proc.wait()
    fd = os.open(cache / "a.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        out = CliRunner().invoke(cli, ["cleanup", "--remove-env", "all"])
        assert "being built" in out.stderr and used.exists()
    finally:
        os.close(fd)
    CliRunner().invoke(cli, ["cleanup", "--remove-env", "all"])
    assert not used.exists()
