"""The cache of built environments, for the user: what is there, how big, when last
used, and removing what is not needed (``ftbench cleanup --envs``).

Every ``launch.env`` spec keeps a virtual environment of up to ~5 GB (a CUDA build of
torch) under the cache (:func:`bench.procs.venvs.cache_dir`). Nothing removes them on
its own: a run that needs one again would pay minutes to rebuild it. So the user
decides, with the sizes and last uses in front of them. An environment that is being
built (its build lock is held) or that a live process runs from is never removed.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from bench.procs.venvs import USED_STAMP, cache_dir


@dataclass(frozen=True, slots=True)
class CachedEnv:
    path: Path
    spec: str
    """The requirements it was built for ("" when its build never finished)."""
    size_bytes: int
    last_used: float
    """Seconds since the epoch: its last use by a run, else when its build finished."""


def listing() -> list[CachedEnv]:
    """Every environment directory under the cache, most recently used first."""
    root = cache_dir()
    if not root.is_dir():
        return []
    out = []
    for path in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            spec = str(json.loads((path / "ftbench-env.json").read_text()).get("spec", ""))
        except (OSError, ValueError, AttributeError):
            spec = ""
        used = path / USED_STAMP
        stamp = used if used.exists() else path / "ftbench-env.json"
        last = stamp.stat().st_mtime if stamp.exists() else path.stat().st_mtime
        out.append(CachedEnv(path=path, spec=spec, size_bytes=_size(path), last_used=last))
    return sorted(out, key=lambda e: -e.last_used)


def remove(env: CachedEnv) -> None:
    """Delete one environment, or RuntimeError saying why it must stay."""
    users = _users(env.path)
    if users:
        raise RuntimeError(f"{env.path} is in use by pid {', '.join(map(str, users))}")
    lock = env.path.with_name(f"{env.path.name}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"{env.path} is being built by another harness") from None
        shutil.rmtree(env.path)
    finally:
        os.close(fd)
    lock.unlink(missing_ok=True)


def describe(env: CachedEnv, now: float | None = None) -> str:
    """One line: spec, size, last use, path."""
    age_s = (now if now is not None else time.time()) - env.last_used
    days = age_s / 86_400
    when = f"{days:.0f} days ago" if days >= 1 else f"{age_s / 3600:.1f} h ago"
    spec = env.spec or "(unfinished build)"
    return f"{spec:40s} {env.size_bytes / 1e9:6.2f} GB  used {when:>12s}  {env.path}"


def _size(path: Path) -> int:
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_blocks * 512
            except OSError:
                continue
    return total


def _users(path: Path) -> list[int]:
    """Live processes running a program of the environment: by the command they were
    started with (a venv's ``bin/python`` is a link to the base interpreter, so only its
    argv[0] names the environment) or by the file they execute."""
    found = []
    prefix = str(path) + os.sep
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        if _argv0(entry).startswith(prefix) or _exe(entry).startswith(prefix):
            found.append(int(entry.name))
    return found


def _argv0(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return ""


def _exe(proc: Path) -> str:
    try:
        return os.readlink(proc / "exe")
    except OSError:
        return ""
