"""Environments: one scenario against other versions of the stack, as asv does for benchmarks.

A point's ``launch.env`` names requirements (``"torch==2.13.0"``, ``"torch==2.14.1
torchft==0.2.0"``); "" is the harness's own environment. For each distinct spec, a
virtual environment is built once and cached (:func:`prepare`; :func:`cached` looks one
up without building), and the point's trials run in a child harness started with that
environment's interpreter, so that every process of the trial (store, ranks, agents,
lighthouse) imports the stack under test.

The environment holds the requirements only. A ``.pth`` file appends the directories
named in ``$FTBENCH_HARNESS_PATH`` (:data:`HARNESS_PATH`) *after* its own site-packages
on ``sys.path``: ftbench's repository, then the harness's site-packages. So the spec's
packages win and everything else (pandas, click...) comes from the harness. The harness
sets the variable for the child harness (:func:`child_environ`) and every process the
child starts inherits it; nothing in the environment names a repository or a harness,
so one cached environment serves every clone of the repository on the machine (the
cache key is the spec and the Python version, nothing else).

The environment's requirements are pinned by the user's spec, so its ``pip install``
runs with ``PIP_CONSTRAINT`` pointing at an empty file inside the environment: a cap in
pip's configuration (``constraint = ...``, such as ``torch<=2.14.1``) is set aside, said
in the progress and recorded in ``ftbench-env.json``. Any later pip call into such an
environment needs the same override (``PIP_CONSTRAINT=<env>/ftbench-no-constraints.txt``)
or pip would apply the cap again.

The cache (``$FTBENCH_ENV_DIR``, else ``~/.cache/ftbench/envs``) must be a directory of
the running user that nobody else can write: interpreters from it are executed, and so
is the ``.pth`` line.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import shutil
import site
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.procs.pipinstall import BUILD_TIMEOUT_S as BUILD_TIMEOUT_S
from bench.procs.pipinstall import EnvBuildError as EnvBuildError
from bench.procs.pipinstall import configured_constraints, pip_install, stream
from bench.scenario.requirements import parse

REPO_ROOT = Path(__file__).resolve().parents[2]
USED_STAMP = "ftbench-used"
"""In an environment: touched whenever a run uses it (its mtime is the last use)."""
PROBE = "import json; from bench.procs.machine import stack_versions; print(json.dumps(stack_versions()))"
"""Run by an environment's interpreter (ftbench is on its path through the .pth file)."""
HARNESS_PATH = "FTBENCH_HARNESS_PATH"
"""The directories (``os.pathsep``-separated) an environment's interpreter appends to
``sys.path`` after its own site-packages: ftbench's repository and the harness's
site-packages. Set by :func:`child_environ`; inherited by every process below."""
PTH_NAME = "zz-ftbench-harness.pth"
PTH_LINE = (
    "import os, sys; sys.path.extend([p for p in dict.fromkeys(os.environ.get("
    f'"{HARNESS_PATH}", "").split(os.pathsep)) if p and p not in sys.path])'
)
"""The ``.pth`` line (site.py executes a line that starts with ``import``)."""
MIN_FREE_GB_TORCH = 8.0
"""Free space (GB) under the cache needed to build an environment that holds torch: a
CUDA build of torch is ~5.3 GB installed, plus pip's download cache and unpacking.
``$FTBENCH_ENV_MIN_FREE_GB`` overrides it (and :data:`MIN_FREE_GB`)."""
MIN_FREE_GB = 1.0
"""Free space (GB) needed to build an environment without torch."""
MIN_FREE_ENV = "FTBENCH_ENV_MIN_FREE_GB"


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


def python_version() -> str:
    """major.minor.micro of the harness's interpreter (an environment's is the same)."""
    return "{}.{}.{}".format(*sys.version_info[:3])


def key(normal: str) -> str:
    """The cache key of a normalised spec: the spec and the Python version only, never
    the harness's path, so that another clone of the repository finds the environment."""
    return hashlib.sha256(f"{normal}|{python_version()}".encode()).hexdigest()[:16]


def harness_path() -> str:
    """``$FTBENCH_HARNESS_PATH`` for a child: ftbench's repository, then the harness's
    site-packages. Inherited as is where already set (a child harness passes on its
    parent's, never its environment's site-packages)."""
    inherited = os.environ.get(HARNESS_PATH)
    if inherited:
        return inherited
    return os.pathsep.join([str(REPO_ROOT), *(p for p in site.getsitepackages() if Path(p).is_dir())])


def child_environ(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables of a process started with an environment's interpreter."""
    return dict(os.environ if base is None else base, **{HARNESS_PATH: harness_path()})


def cached(spec: str) -> Environment | None:
    """The environment of ``spec`` if it needs no build (already built and cached, or
    the harness's own environment holds it), else None; never builds."""
    reqs = parse(spec)
    normal = " ".join(reqs)
    if not reqs or satisfied(reqs):
        from bench.procs.machine import stack_versions

        return Environment(spec=normal, python=sys.executable, versions=stack_versions())
    root = cache_dir()
    if not root.is_dir():
        return None
    return _ready(_private(root) / key(normal), normal)


def _ready(path: Path, normal: str) -> Environment | None:
    """The environment built at ``path``, if its build finished and its interpreter is
    there (a venv's ``bin/python`` links to the base interpreter, which may be gone)."""
    python = path / "bin" / "python"
    try:
        info = json.loads((path / "ftbench-env.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("spec") != normal or not python.exists():
        return None
    return Environment(spec=normal, python=str(python), versions=dict(info.get("versions") or {}))


def prepare(spec: str, *, progress: Callable[[str], None] = lambda _line: None) -> Environment:
    """The environment of ``spec``, built and cached on first use."""
    reqs = parse(spec)
    normal = " ".join(reqs)
    found = cached(spec)
    if found is not None:
        if reqs and found.python == sys.executable:
            progress(f"  environment {normal!r}: the harness's own environment has it")
        else:
            _used(Path(found.python).parents[1])
        return found
    root = _private(cache_dir())
    path = root / key(normal)
    with _locked(root / f"{path.name}.lock", normal, progress):
        found = _ready(path, normal)  # built meanwhile by another harness
        if found is not None:
            return found
        check_free(root, reqs)
        progress(f"  environment {normal!r}: building {path} (once; cached)")
        start = time.monotonic()
        try:
            set_aside = _build(path, reqs, progress)
            info = {
                "spec": normal,
                "python": python_version(),
                "versions": probe(str(path / "bin" / "python")),
                "pip_constraints_set_aside": set_aside,
                "build_s": round(time.monotonic() - start, 1),
            }
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)  # gigabytes of a build that did not finish
            raise
        tmp = path / "ftbench-env.json.tmp"
        tmp.write_text(json.dumps(info))
        tmp.replace(path / "ftbench-env.json")
        progress(f"  environment {normal!r}: built in {info['build_s']:.0f} s: {info['versions']}")
    found = _ready(path, normal)
    _used(path)
    if found is None:
        raise EnvBuildError(f"the environment {normal!r} at {path} was built but its interpreter does not run")
    return found


@contextlib.contextmanager
def _locked(lock: Path, normal: str, progress: Callable[[str], None]) -> Iterator[None]:
    """One build of an environment at a time (two harnesses, two clones, one cache)."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"  environment {normal!r}: another harness is building it; waiting")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def min_free_gb(reqs: list[str]) -> float:
    """The free space (GB) a build of ``reqs`` needs: :data:`MIN_FREE_GB_TORCH` or
    :data:`MIN_FREE_GB`, or ``$FTBENCH_ENV_MIN_FREE_GB``."""
    override = os.environ.get(MIN_FREE_ENV)
    if override:
        try:
            return float(override)
        except ValueError:
            raise EnvBuildError(f"{MIN_FREE_ENV}={override!r} is not a number of GB") from None
    from packaging.requirements import Requirement

    torch = any(Requirement(r).name.lower() == "torch" for r in reqs)
    return MIN_FREE_GB_TORCH if torch else MIN_FREE_GB


def check_free(root: Path, reqs: list[str]) -> None:
    """EnvBuildError, before anything is downloaded, if ``root`` has too little space."""
    need = min_free_gb(reqs)
    free = shutil.disk_usage(root).free / 1e9
    if free < need:
        raise EnvBuildError(
            f"only {free:.1f} GB free under {root}, and building an environment of {' '.join(reqs)!r} "
            f"needs {need:g} GB: free some space, or set FTBENCH_ENV_DIR to a directory on a larger disk "
            f"({MIN_FREE_ENV} sets the threshold)"
        )


def _build(path: Path, reqs: list[str], progress: Callable[[str], None]) -> str | None:
    """Build the environment at ``path``; the configured pip constraints set aside, if any."""
    if path.exists():
        shutil.rmtree(path)  # a build that did not finish
    _run([sys.executable, "-m", "venv", str(path)], "create the virtual environment")
    python = str(path / "bin" / "python")
    configured = configured_constraints(python)
    if configured:
        progress(f"  pip's configured constraints ({configured}) are set aside: the spec pins its own versions")
    argv, env = pip_install(path, reqs, hide=(HARNESS_PATH,))
    stream(argv, env=env, what=f"install {reqs}", progress=progress)
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    _refuse_shadows(path, Path(purelib), reqs)
    # After the environment's own packages: ftbench itself, then the harness's packages.
    Path(purelib, PTH_NAME).write_text(PTH_LINE + "\n")
    return configured


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
        env=child_environ(),
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


def _used(path: Path) -> None:
    """Stamp an environment's last use (``ftbench cleanup --envs`` shows it)."""
    with contextlib.suppress(OSError):
        (path / USED_STAMP).touch()


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
