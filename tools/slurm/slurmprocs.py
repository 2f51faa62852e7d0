"""Processes and namespaces of the local Slurm cluster: polling, liveness, leftovers.
Standard library only."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from slurmconf import NETNS_DIR, NETNS_PREFIX

SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"])


def wait_until(ready: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``ready`` every 0.1 s for up to ``timeout_s``; whether it came true."""
    deadline = time.monotonic() + timeout_s
    while True:
        if ready():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is dead: it only waits to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def orphan_zombies() -> list[int]:
    """Zombies of Slurm or munge daemons waiting for init to reap them (cosmetic, but `ps` shows them)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm, _, rest = stat.partition("(")[2].rpartition(")")
        fields = rest.split()
        if fields[:2] == ["Z", "1"] and comm in ("slurmstepd", "slurmd", "slurmctld", "munged"):
            found.append(int(entry.name))
    return found


def tail(path: Path, lines: int = 3) -> str:
    """The last lines of a log, joined on one line, for an error message that says why."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def leftover_namespaces() -> list[str]:
    """Every ``ftslurm-*`` network namespace on the machine (a cluster's, or a dead one's)."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(NETNS_PREFIX))
    except FileNotFoundError:
        return []
