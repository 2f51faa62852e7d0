"""Environments of ``ftbench run --env``: what a spec may hold, when none is built, how a
run of several environments splits into views that compare and gate."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.procs import venvs
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
