"""Environments: one scenario against other versions of the stack, as asv does for benchmarks.

A point's ``launch.env`` names requirements (``"torch==2.13.0"``, ``"torch==2.14.1
torchft==0.2.0"``); "" is the harness's own environment. For each distinct spec, a
virtual environment is built once and cached (:func:`prepare`), and the point's trials
run in a child harness started with that environment's interpreter, so that every
process of the trial (store, ranks, agents, lighthouse) imports the stack under test.
The environment holds the requirements only: a ``.pth`` file puts ftbench and the
harness's own site-packages *after* them on ``sys.path``, so the spec's packages win
and everything else (pandas, click...) comes from the harness.

The cache (``$FTBENCH_ENV_DIR``, else ``~/.cache/ftbench/envs``) must be a directory of
the running user that nobody else can write: interpreters from it are executed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import site
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.scenario.requirements import parse

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 1800.0
"""A CUDA build of torch is several GB: installing it can take minutes."""
PROBE = "import json; from bench.procs.machine import stack_versions; print(json.dumps(stack_versions()))"
"""Run by an environment's interpreter (ftbench is on its path through the .pth file)."""


class EnvBuildError(RuntimeError):
    """An environment could not be built or used; the message says why."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Environment:
    spec: str
    """The requirements, normalised (sorted, single spaces); "" for the harness's own."""
    python: str
    """The interpreter that runs the point's trials."""
    versions: dict[str, Any] = field(default_factory=dict)
    """What it holds: python, torch, nccl, torchft, nvrx."""


def satisfied(reqs: list[str]) -> bool:
    """Whether the harness's own environment already holds every requirement (then no
    environment is built: ``--env torch==2.13.0`` on a harness with torch 2.13.0+cpu)."""
    from packaging.requirements import Requirement

    for text in reqs:
        req = Requirement(text)
        try:
            installed = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            return False
        if req.extras or not req.specifier.contains(installed, prereleases=True):
            return False
    return True


def cache_dir() -> Path:
    override = os.environ.get("FTBENCH_ENV_DIR")
    return Path(override) if override else Path.home() / ".cache" / "ftbench" / "envs"


def prepare(spec: str, *, progress: Callable[[str], None] = lambda _line: None) -> Environment:
    """The environment of ``spec``, built and cached on first use."""
    reqs = parse(spec)
    if not reqs:
        from bench.procs.machine import stack_versions

        return Environment(spec="", python=sys.executable, versions=stack_versions())
    normal = " ".join(reqs)
    if satisfied(reqs):
        from bench.procs.machine import stack_versions

        progress(f"  environment {normal!r}: the harness's own environment has it")
        return Environment(spec=normal, python=sys.executable, versions=stack_versions())
    root = _private(cache_dir())
    key = hashlib.sha256(f"{normal}|{sys.version}|{sys.executable}".encode()).hexdigest()[:16]
    path = root / key
    ready = path / "ftbench-env.json"
    if not ready.exists():
        progress(f"  environment {normal!r}: building {path} (once; cached)")
        _build(path, reqs)
        ready.write_text(json.dumps({"spec": normal, "versions": probe(str(path / "bin" / "python"))}))
    info = json.loads(ready.read_text())
    return Environment(spec=normal, python=str(path / "bin" / "python"), versions=dict(info["versions"]))


def _build(path: Path, reqs: list[str]) -> None:
    if path.exists():
        shutil.rmtree(path)  # a build that did not finish
    _run([sys.executable, "-m", "venv", str(path)], "create the virtual environment")
    python = path / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *reqs], f"install {reqs}")
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    _refuse_shadows(path, Path(purelib), reqs)
    # After the environment's own packages: ftbench itself, then the harness's packages.
    harness = [p for p in site.getsitepackages() if Path(p).is_dir()]
    Path(purelib, "zz-ftbench-harness.pth").write_text("\n".join([str(REPO_ROOT), *harness]) + "\n")


SHADOWED = ("bench", "injectors")
"""ftbench's import names: an environment that ships its own would run that instead."""


def _refuse_shadows(venv: Path, purelib: Path, reqs: list[str]) -> None:
    """EnvBuildError when a requirement installed a top-level ``bench`` or ``injectors``
    (docs/design.md, "Import names"): ranks would import it in place of ftbench's."""
    found = [n for n in SHADOWED if (purelib / n).is_dir() or (purelib / f"{n}.py").is_file()]
    if found:
        shutil.rmtree(venv, ignore_errors=True)  # never left half-built for a later run to use
        raise EnvBuildError(
            f"the requirements {reqs} install a top-level module named {', '.join(found)}, "
            "which would shadow ftbench's own package of that name"
        )


def probe(python: str) -> dict[str, Any]:
    """The versions an interpreter's environment holds."""
    done = subprocess.run(
        [python, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )
    if done.returncode != 0:
        raise EnvBuildError(f"{python} cannot import torch: {done.stderr.strip()[-300:]}")
    versions: dict[str, Any] = json.loads(done.stdout)
    return versions


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        raise EnvBuildError(f"could not {what}: no answer within {BUILD_TIMEOUT_S:.0f} s") from err
    if done.returncode != 0:
        raise EnvBuildError(f"could not {what}: {(done.stderr or done.stdout).strip()[-500:]}")


def _private(path: Path) -> Path:
    """``path``, created 0700 if missing; refused if someone else could write it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise EnvBuildError(
            f"{path}: the environment cache must be a directory of uid {os.geteuid()} that "
            "nobody else can write (its interpreters are executed)"
        )
    return path
