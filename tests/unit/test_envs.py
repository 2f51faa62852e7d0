"""Environments of ``ftbench run --env``: what a spec may hold, when none is built, how a
run of several environments splits into views that compare and gate."""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.procs import pipinstall, venvs
from bench.procs.machine import stack_versions
from bench.results import compare as cmp
from bench.results import envcompare
from bench.results import gate as gt
from bench.results.reader import load
from bench.scenario.config import ConfigError
from bench.scenario.loader import parse, points
from bench.scenario.model import GateSpec
from tests.unit.runfactory import trial, write_run

FAST = [0.010 + 0.001 * i for i in range(8)]
SLOW = [0.050 + 0.001 * i for i in range(8)]


@pytest.mark.parametrize(
    "spec",
    [
        "torch @ https://example.com/torch.whl",
        "./torch",
        "/tmp/x.whl",
        "--index-url=http://evil",
        "-e .",
        "torch==2.13.0;os.system('x')",
        "git+https://github.com/pytorch/torchft",
    ],
)
def test_a_spec_names_packages_of_the_index_only(spec: str) -> None:
    with pytest.raises(ValueError, match="is not a requirement"):
        venvs.parse(spec)


def test_a_spec_is_normalised() -> None:
    assert venvs.parse("  torchft==0.2.0   torch==2.13.0 ") == ["torch==2.13.0", "torchft==0.2.0"]
    assert venvs.parse("") == []


def test_a_bad_spec_is_a_scenario_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"launch\.env.*NAME\[==VERSION\]"):
        parse({"name": "x", "launch": {"env": "torch @ file:///tmp/t.whl"}}, file="x.toml")


def test_the_harness_environment_serves_what_it_holds() -> None:
    torch = stack_versions()["torch"].split("+")[0]
    assert venvs.satisfied([f"torch=={torch}"])
    assert not venvs.satisfied(["torch==1.0.0"])
    assert not venvs.satisfied(["surely-not-a-distribution-ftbench==1"])
    env = venvs.prepare(f"torch=={torch}")
    assert env.python == os.sys.executable and env.spec == f"torch=={torch}"


def test_a_cache_others_can_write_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "envs"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    monkeypatch.setenv("FTBENCH_ENV_DIR", str(cache))
    with pytest.raises(venvs.EnvBuildError, match="nobody else can write"):
        venvs.prepare("surely-not-a-distribution-ftbench==1")


def test_environments_are_points_of_their_own() -> None:
    sc = parse(
        {"name": "x", "sweep": {"launch.env": ["", "torch==2.13.0"]}},
        file="x.toml",
    )
    a, b = points(sc)
    assert a.point_hash != b.point_hash
    assert (a.scenario.launch.env, b.scenario.launch.env) == ("", "torch==2.13.0")


def test_an_added_default_field_keeps_the_point_hash() -> None:
    """A run resumed by a newer ftbench still finds its finished trials: fields at their
    defaults do not reach the hash (the env key did not exist in older runs)."""
    plain = points(parse({"name": "x"}, file="x.toml"))[0]
    explicit = points(parse({"name": "x", "launch": {"env": ""}}, file="x.toml"))[0]
    assert plain.point_hash == explicit.point_hash


def _two_envs(tmp_path: Path, slow_env: str) -> Path:
    return write_run(
        tmp_path,
        "kill",
        {
            "env=": [trial(t, 0.03) for t in FAST],
            f"env={slow_env}": [trial(t, 0.03) for t in SLOW],
        },
        values={"env=": {"launch.env": ""}, f"env={slow_env}": {"launch.env": slow_env}},
    )


def test_one_environment_is_the_baseline_of_the_other(tmp_path: Path) -> None:
    run = load(_two_envs(tmp_path, "torch==2.14.1"))
    assert envcompare.environments(run) == ["", "torch==2.14.1"]
    base, others = envcompare.split(run, "")
    ((env, cand),) = others
    assert env == "torch==2.14.1"
    assert [p["label"] for p in base.points()] == [p["label"] for p in cand.points()] == ["kill"]
    opts = cmp.GateOptions.from_spec(GateSpec(metric="ttd_s"))
    result = gt.gate(run, opts, env_baseline="")
    (row,) = result.rows
    assert row.mark == "+" and row.how == "label"
    assert "torch==2.14.1" in row.label
    assert result.status == gt.REGRESSION
    # the other way round, the slow environment as the baseline: an improvement
    (row,) = gt.gate(run, opts, env_baseline="torch==2.14.1").rows
    assert row.mark == "-"


def test_an_unknown_environment_baseline_names_the_ones_there(tmp_path: Path) -> None:
    run = load(_two_envs(tmp_path, "torch==2.14.1"))
    with pytest.raises(ConfigError, match=r"--env-baseline.*torch==2\.14\.1"):
        envcompare.split(run, "torch==9.9")


def test_compare_and_gate_commands_take_an_environment_baseline(tmp_path: Path) -> None:
    path = _two_envs(tmp_path, "torch==2.14.1")
    runner = CliRunner()
    out = runner.invoke(cli, ["compare", str(path), "--env-baseline", "", "--metric", "ttd_s"])
    assert out.exit_code == 0, out.output
    assert "+" in out.output and "[torch==2.14.1 vs harness env]" in out.output
    out = runner.invoke(cli, ["gate", str(path), "--env-baseline", "", "--metric", "ttd_s", "--no-slo"])
    assert out.exit_code == 1 and "REGRESSION" in out.output, out.output
    out = runner.invoke(cli, ["compare", str(path)])
    assert out.exit_code == 2 and "--env-baseline" in out.output


def test_an_environment_that_shadows_ftbench_is_refused(tmp_path: Path) -> None:
    """A requirement that ships a top-level ``bench`` would be imported by the ranks in
    place of ftbench's own: the build is refused, naming it, and nothing is left."""
    venv = tmp_path / "env"
    purelib = venv / "lib" / "python3" / "site-packages"
    (purelib / "bench").mkdir(parents=True)
    with pytest.raises(venvs.EnvBuildError, match="top-level module named bench"):
        venvs._refuse_shadows(venv, purelib, ["somebench==1"])
    assert not venv.exists()
    (purelib).mkdir(parents=True)
    venvs._refuse_shadows(venv, purelib, ["torch==2.13.0"])  # nothing of ours shadowed: no error


def test_the_cache_key_is_the_spec_and_the_python_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another clone of the repository (another harness interpreter, another folder)
    finds the environment the first built: the key names neither."""
    key = venvs.key("torch==2.15.0")
    monkeypatch.setattr(sys, "executable", "/elsewhere/clone/.venv/bin/python")
    monkeypatch.setattr(venvs, "REPO_ROOT", Path("/elsewhere/clone"))
    assert venvs.key("torch==2.15.0") == key
    assert venvs.key("torch==2.14.1") != key
    monkeypatch.setattr(venvs, "python_version", lambda: "3.11.8")
    assert venvs.key("torch==2.15.0") != key


def test_a_build_without_the_free_space_is_refused_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FTBENCH_ENV_DIR", str(tmp_path))
    monkeypatch.setenv("FTBENCH_ENV_MIN_FREE_GB", "1e9")
    with pytest.raises(venvs.EnvBuildError) as err:
        venvs.prepare("surely-not-a-distribution-ftbench==1")
    text = str(err.value)
    assert "\n" not in text
    assert re.search(rf"only [\d.]+ GB free under {re.escape(str(tmp_path))}", text), text
    assert "needs 1e+09 GB" in text and "free some space" in text and "FTBENCH_ENV_DIR" in text
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []  # nothing built
    monkeypatch.setenv("FTBENCH_ENV_MIN_FREE_GB", "lots")
    with pytest.raises(venvs.EnvBuildError, match="FTBENCH_ENV_MIN_FREE_GB='lots' is not a number"):
        venvs.min_free_gb(["torch==2.15.0"])
    monkeypatch.delenv("FTBENCH_ENV_MIN_FREE_GB")
    assert venvs.min_free_gb(["torch==2.15.0", "torchft==0.2.0"]) == venvs.MIN_FREE_GB_TORCH >= 8
    assert venvs.min_free_gb(["torchft==0.2.0"]) == venvs.MIN_FREE_GB < venvs.MIN_FREE_GB_TORCH


def _wheel(folder: Path, name: str, version: str) -> None:
    """A minimal pure-Python wheel of ``name`` ``version`` in ``folder``."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: ftbench-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{f},,\n" for f in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for f, text in (files | {f"{dist}/RECORD": record}).items():
            whl.writestr(f, text)


def test_the_pip_call_sets_the_configured_constraints_aside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec pins its own versions: a cap in pip's configuration (here PIP_CONSTRAINT,
    which pip reads like its config files) is named, then set aside for the environment's
    pip, which the real pip (offline, a dry run) then lets install past it."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "ftbprobe", "2.0")
    cap = tmp_path / "constraints.txt"
    cap.write_text("ftbprobe<=1.0\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(cap))
    assert pipinstall.configured_constraints(sys.executable) == str(cap)
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    argv, env = pipinstall.pip_install(env_dir, ["ftbprobe==2.0"])
    empty = env_dir / pipinstall.NO_CONSTRAINTS
    assert env["PIP_CONSTRAINT"] == str(empty) and empty.read_text() == ""
    assert argv[0] == str(env_dir / "bin" / "python") and argv[-1] == "ftbprobe==2.0"
    assert "-q" not in argv and argv[argv.index("--progress-bar") + 1] == "off"
    offline = [sys.executable, *argv[1:-1], "--dry-run", "--no-index", "--find-links", str(wheels), argv[-1]]
    capped = subprocess.run(offline, capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert capped.returncode != 0  # the configured cap, as pip applies it
    done = subprocess.run(offline, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Would install ftbprobe-2.0" in done.stdout


PIP_LIKE = r"""
import sys, time
print("Collecting torch==2.15.0")
print("  Obtaining dependency information for torch==2.15.0")
print("  Downloading torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl (539.1 MB)" + "x" * 200)
print("Installing collected packages: torch")
time.sleep(float(sys.argv[1]))
print("Successfully installed torch-2.15.0")
print("ERROR: something went wrong")
sys.exit(int(sys.argv[2]))
"""


def _pip_like(pause: float, code: int, **kw: Any) -> list[str]:
    lines: list[str] = []
    pipinstall.stream(
        [sys.executable, "-c", PIP_LIKE, str(pause), str(code)],
        env=os.environ,
        what="install ['torch==2.15.0']",
        progress=lines.append,
        **kw,
    )
    return lines


def test_pip_output_is_streamed_filtered_and_timed() -> None:
    lines = _pip_like(0.0, 0)
    assert [re.sub(r"^    \[ *\d+s\] ", "", line)[:20] for line in lines] == [
        "Collecting torch==2.",
        "Downloading torch-2.",
        "Installing collected",
        "Successfully install",
        "ERROR: something wen",
    ]
    assert all(re.match(r"    \[ *\d+s\] \S", line) for line in lines)
    long = lines[1].split("] ", 1)[1]
    assert len(long) == pipinstall.SHOWN_CHARS and long.endswith("...")


def test_a_silent_install_shows_it_is_alive_and_a_failure_names_pips_last_words() -> None:
    lines: list[str] = []
    with pytest.raises(venvs.EnvBuildError, match=r"(?s)could not install \['torch==2.15.0'\]: .*ERROR: something"):
        lines = []
        pipinstall.stream(
            [sys.executable, "-c", PIP_LIKE, "1.5", "1"],
            env=os.environ,
            what="install ['torch==2.15.0']",
            progress=lines.append,
            heartbeat=0.5,
        )
    assert any("still running (last: Installing collected packages" in line for line in lines), lines


def test_an_install_past_the_timeout_is_ended() -> None:
    start = time.monotonic()
    with pytest.raises(venvs.EnvBuildError, match="no answer within 1 s"):
        _pip_like(60.0, 0, timeout=1.0)
    assert time.monotonic() - start < 10


def test_the_pth_line_appends_the_harness_after_the_environment(tmp_path: Path) -> None:
    """site.py executes the .pth line: the directories of FTBENCH_HARNESS_PATH come
    after the environment's site-packages, once each; without the variable, nothing."""
    site_dir = tmp_path / "site-packages"
    site_dir.mkdir()
    (site_dir / venvs.PTH_NAME).write_text(venvs.PTH_LINE + "\n")
    code = f"import site, sys; site.addsitedir({str(site_dir)!r}); print('\\n'.join(sys.path))"
    harness = os.pathsep.join(["/ftbench/repo", "/harness/site-packages", "/ftbench/repo"])
    env = {k: v for k, v in os.environ.items() if k != venvs.HARNESS_PATH}
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.split()[-1] == str(site_dir)
    env[venvs.HARNESS_PATH] = harness
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.split()[-3:] == [str(site_dir), "/ftbench/repo", "/harness/site-packages"]


def test_a_child_gets_the_repository_then_the_harness_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(venvs.HARNESS_PATH, raising=False)
    path = venvs.child_environ()[venvs.HARNESS_PATH].split(os.pathsep)
    assert path[0] == str(venvs.REPO_ROOT)
    assert path[1:] == [p for p in site.getsitepackages() if Path(p).is_dir()]
    monkeypatch.setenv(venvs.HARNESS_PATH, "/from/the/parent")  # a child harness passes its parent's on
    assert venvs.child_environ({})[venvs.HARNESS_PATH] == "/from/the/parent"


def test_cached_finds_a_built_environment_and_never_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FTBENCH_ENV_DIR", str(tmp_path / "envs"))
    spec = "surely-not-a-distribution-ftbench==1"
    assert venvs.cached(spec) is None
    assert not (tmp_path / "envs").exists()  # a look-up creates nothing
    torch = stack_versions()["torch"].split("+")[0]
    own = venvs.cached(f"torch=={torch}")
    assert own is not None and own.python == sys.executable
    built = venvs._private(tmp_path / "envs") / venvs.key(spec)
    (built / "bin").mkdir(parents=True)
    assert venvs.cached(spec) is None  # a build that did not finish
    versions = {"torch": "2.15.0+cu132"}
    (built / "ftbench-env.json").write_text(json.dumps({"spec": spec, "versions": versions}))
    assert venvs.cached(spec) is None  # its interpreter is gone
    (built / "bin" / "python").symlink_to(sys.executable)
    found = venvs.cached(f"  {spec} ")
    assert found == venvs.Environment(spec=spec, python=str(built / "bin" / "python"), versions=versions)
    assert venvs.prepare(spec) == found  # prepare does not rebuild it
