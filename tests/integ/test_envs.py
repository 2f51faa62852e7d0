"""``ftbench run --env``: a scenario run in several environments from the CLI, one of
them built for real (torch and torchft 0.2.0 from the package index), every row tagged
with the versions that ran it, and one environment compared against the other."""

from __future__ import annotations

import csv
import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.procs import venvs
from bench.procs.machine import stack_versions

pytestmark = pytest.mark.integ

ROOT = Path(__file__).resolve().parents[2]
OLD = "torch==2.13.0 torchft==0.2.0"

SCENARIO = """
name = "envs"
[workload]
kind = "ddp"
world_size = 2
steps = 120
pg_timeout_s = 10
[[faults]]
kind = "kill"
target = { ranks = [1] }
trigger = { at_step = 30, jitter = "step" }
[recovery]
strategy = "torchft"
[recovery.torchft]
heartbeat_timeout_ms = 2000
restart_delay_s = 1.0
ddp_workaround = "off"
[measure]
trials = 1
deadline_s = 60
"""


def ftbench(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


@pytest.fixture(scope="module")
def old_torchft() -> venvs.Environment:
    """torchft 0.2.0's environment, built (or found in the cache) before the run, so that
    a machine without the package index skips with the reason instead of failing."""
    if stack_versions()["torchft"] is None:
        pytest.skip("torchft is not installed in the harness (pip install 'ftbench[torchft]')")
    try:
        return venvs.prepare(OLD)
    except venvs.EnvBuildError as err:
        pytest.skip(f"cannot build the environment {OLD!r} here: {err}")


@pytest.mark.timeout(420)
def test_two_environments_side_by_side(old_torchft: venvs.Environment, tmp_path: Path) -> None:
    assert old_torchft.versions["torchft"] == "0.2.0"
    scenario = tmp_path / "envs.toml"
    scenario.write_text(SCENARIO)
    done = ftbench("run", str(scenario), "--env", OLD, "--env", "", "--out", str(tmp_path), timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (tmp_path / "envs").iterdir()
    with open(run / "trials.csv") as fh:
        rows = {r["env"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {OLD, ""}
    old, own = rows[OLD], rows[""]
    harness = stack_versions()
    assert (old["torchft"], own["torchft"]) == ("0.2.0", harness["torchft"])
    assert old["torch"].startswith("2.13.0") and own["torch"] == harness["torch"]
    assert old["python"] == own["python"] == harness["python"]
    # 0.2.0's DDP without the workaround: the survivors recover, or its comm hook takes
    # them down, which is an outcome named for what it is, never a harness crash.
    assert old["outcome"] in ("recovered", "failed"), old
    if old["outcome"] == "failed":
        assert old["error"].startswith("survivors crashed") and float(old["survivor_crashes"]) >= 1, old
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "complete"
    assert info["environments"][OLD]["torchft"] == "0.2.0"

    compared = ftbench("compare", str(run), "--env-baseline", OLD, "--metric", "ttd_s", timeout=120)
    assert compared.returncode == 0, compared.stderr
    assert f"[harness env vs {OLD}]" in compared.stdout
    report = ftbench("report", str(run), timeout=300)
    assert report.returncode == 0, report.stderr
    text = (run / "report.md").read_text()
    assert f"env={OLD}" in text and "environment " + OLD in text


TREE = r"""
import json, multiprocessing, subprocess, sys


def where(out=None):
    import bench, torch
    seen = {"bench": bench.__file__, "torch": torch.__file__, "version": torch.__version__, "path": sys.path}
    if out is None:
        return seen
    out.put(seen)


if __name__ == "__main__":
    if sys.argv[1:] == ["leaf"]:
        print(json.dumps(where()))
        sys.exit()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    rank = ctx.Process(target=where, args=(out,))
    rank.start()
    spawned = out.get(timeout=120)
    rank.join()
    leaf = subprocess.run([sys.executable, __file__, "leaf"], capture_output=True, text=True, check=True)
    print(json.dumps({"child": where(), "spawned": spawned, "subprocess": json.loads(leaf.stdout)}))
"""


def _process_tree(env: venvs.Environment, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """What a child harness in ``env`` and the processes it starts (a rank by
    multiprocessing's spawn, a subprocess of the environment's interpreter) import, from
    a folder outside the repository and without PYTHONPATH: ftbench comes through the
    environment's .pth and the FTBENCH_HARNESS_PATH the harness gives the child."""
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    environ = {k: v for k, v in venvs.child_environ().items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [env.python, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=environ
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, dict[str, Any]] = json.loads(done.stdout)
    return seen


def _assert_env_first(env: venvs.Environment, seen: dict[str, dict[str, Any]]) -> None:
    prefix = Path(env.python).parent.parent
    harness = next(p for p in site.getsitepackages() if Path(p).is_dir())
    for who, s in seen.items():
        assert Path(s["torch"]).is_relative_to(prefix), (who, s["torch"])  # the environment's torch
        assert Path(s["bench"]).is_relative_to(ROOT), (who, s["bench"])
        path = s["path"]
        own = next(i for i, p in enumerate(path) if Path(p).is_relative_to(prefix))
        assert own < path.index(str(ROOT)) < path.index(harness), (who, path)


def test_every_process_under_a_child_harness_imports_the_environment(
    old_torchft: venvs.Environment, tmp_path: Path
) -> None:
    seen = _process_tree(old_torchft, tmp_path)
    _assert_env_first(old_torchft, seen)
    assert {s["version"] for s in seen.values()} == {old_torchft.versions["torch"]}


def test_a_cached_cuda_torch_environment_serves_its_processes(tmp_path: Path) -> None:
    """Where ``--env torch==2.15.0`` has been built here (it is not built by the tests:
    a CUDA build is ~5 GB), its processes run torch 2.15.0 and ftbench."""
    env = venvs.cached("torch==2.15.0")
    if env is None:
        pytest.skip("no cached environment of torch==2.15.0 (ftbench run --env torch==2.15.0 builds it)")
    seen = _process_tree(env, tmp_path)
    _assert_env_first(env, seen)
    assert {s["version"].split("+")[0] for s in seen.values()} == {"2.15.0"}


CLONE = r"""
import json, subprocess, sys
from bench.procs import venvs
env = venvs.cached(sys.argv[1])
if env is None:
    sys.exit("not cached")
code = "import bench, importlib.metadata as m; print(bench.__file__); print(m.version('torchft'))"
environ = {k: v for k, v in venvs.child_environ().items() if k != "PYTHONPATH"}
ran = subprocess.run([env.python, "-c", code], env=environ, cwd="/", capture_output=True, text=True, check=True)
print(json.dumps([env.python, str(venvs.REPO_ROOT), ran.stdout.split()]))
"""


def test_another_clone_reuses_the_environment(old_torchft: venvs.Environment, tmp_path: Path) -> None:
    """A second clone of the repository (CI's fresh checkout in another folder) finds the
    environment the first built, and its processes import the second clone's ftbench."""
    clone = tmp_path / "clone"
    ignore = shutil.ignore_patterns("__pycache__")
    for package in ("bench", "injectors"):
        shutil.copytree(ROOT / package, clone / package, ignore=ignore)
    code = CLONE.strip()
    environ = {k: v for k, v in os.environ.items() if k != venvs.HARNESS_PATH} | {"PYTHONPATH": str(clone)}
    done = subprocess.run(
        [sys.executable, "-c", code, OLD], capture_output=True, text=True, timeout=300, cwd=clone, env=environ
    )
    assert done.returncode == 0, done.stderr[-3000:]
    python, root, imported = json.loads(done.stdout)
    assert (python, root) == (old_torchft.python, str(clone))
    assert imported == [str(clone / "bench" / "__init__.py"), "0.2.0"]
