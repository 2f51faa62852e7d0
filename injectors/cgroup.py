"""Memory cgroups for the ``oom`` fault: each rank in a group of its own, and a real
limit on it when the fault fires, so that the kernel's OOM killer ends the rank.

Charges stay with the group a page was first charged to: moving a running process into
a limited group does not move what it already holds (v1's
``memory.move_charge_at_immigrate`` is refused on recent kernels). So a rank joins its
own group the moment it starts, before it imports torch (:func:`join`), and the fault
later only lowers that group's limit (:class:`Oom`). The groups of a trial live under
one parent (:func:`create_parent`), a child of the harness's own memory cgroup so that
whatever limit the harness runs under still holds for its ranks; the parent is removed
with its children when the trial ends (:func:`remove_tree`), and an undo record removes
it if the harness dies first (``python -m injectors.cgroup remove PATH``).

Both hierarchies are served: v1 (``memory.limit_in_bytes``, ``memory.usage_in_bytes``,
the ``memory`` controller's own mount) and v2 (``memory.max``, ``memory.current``).
"""

from __future__ import annotations

import errno
import functools
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from injectors.base import Target
from injectors.procfs import alive

ROOT = Path("/sys/fs/cgroup")
PREFIX = "ftb-"
"""Every group ftbench creates is named so: what :func:`remove_tree` agrees to remove."""
RATCHET_S = 0.02
"""How often the limit follows the group's usage down while the fault holds."""


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Where memory groups live on this machine and what their files are called."""

    version: int
    mount: Path
    """The memory controller's mount (v1) or the unified mount (v2)."""
    limit: str
    usage: str

    def own(self, pid: int | str = "self") -> Path:
        """The memory group of process ``pid``, as a directory."""
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if (self.version == 1 and "memory" in controllers.split(",")) or (self.version == 2 and controllers == ""):
                return self.mount / path.lstrip("/")
        raise OSError(errno.ENOENT, f"process {pid} is in no memory cgroup of the v{self.version} hierarchy")


def hierarchy() -> Hierarchy | None:
    """The memory cgroup hierarchy of this machine, or None without one."""
    if (ROOT / "memory" / "memory.limit_in_bytes").exists():
        return Hierarchy(1, ROOT / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes")
    try:
        controllers = (ROOT / "cgroup.controllers").read_text().split()
    except OSError:
        return None
    return Hierarchy(2, ROOT, "memory.max", "memory.current") if "memory" in controllers else None


@functools.cache
def unavailable() -> str | None:
    """None when this process can create memory groups, put processes in them and limit
    them; else one line why. Probed once per process by creating and removing a group,
    since a read-only cgroup mount (a container) only shows when one tries."""
    if os.geteuid() != 0:
        return f"memory cgroups need root; running as uid {os.geteuid()}"
    h = hierarchy()
    if h is None:
        return f"no memory cgroup hierarchy under {ROOT} (neither v1's memory controller nor v2's memory.max)"
    try:
        parent = _parent_of_trials(h)
        probe = parent / f"{PREFIX}probe-{os.getpid()}"
        probe.mkdir()
    except OSError as err:
        return f"cannot create a memory cgroup: {err}"
    try:
        (probe / h.limit).write_text("max" if h.version == 2 else "-1")
    except OSError as err:
        return f"cannot set a memory cgroup's limit ({probe / h.limit}): {err}"
    finally:
        probe.rmdir()
    return None


def _parent_of_trials(h: Hierarchy) -> Path:
    """Where a trial's group is made. v1: under the harness's own group. v2 forbids
    processes in a group whose children get the memory controller, and the harness's
    group holds the harness, so its trials' groups go under the root, which must hand
    the controller down (``cgroup.subtree_control``)."""
    if h.version == 1:
        return h.own()
    if "memory" not in (h.mount / "cgroup.subtree_control").read_text().split():
        raise OSError(errno.EPERM, f"{h.mount}/cgroup.subtree_control does not enable memory")
    return h.mount


def create_parent(name: str) -> Path:
    """A trial's parent group (``ftb-NAME``); its children are the ranks' groups."""
    h = hierarchy()
    if h is None:
        raise OSError(errno.ENOENT, "no memory cgroup hierarchy")
    path = _parent_of_trials(h) / f"{PREFIX}{name}"
    path.mkdir()
    if h.version == 2:
        (path / "cgroup.subtree_control").write_text("+memory")
    return path


def join(parent: str, rank: int, pid: int | None = None) -> Path:
    """Put a process (the calling one by default) into a group of its own under
    ``parent`` (a trial's group, named by the harness), without swap, so that a limit
    ends in the OOM killer and not in swapping. Called first thing in a rank, before it
    imports torch; for a command job's rank, by the harness the moment the rank's probe
    announces it (still before torch: the import takes seconds)."""
    pid = os.getpid() if pid is None else pid
    path = Path(os.path.realpath(parent))
    if not path.name.startswith(PREFIX) or ROOT not in path.parents:
        raise ValueError(f"{parent}: expected a group ftbench created under {ROOT}")
    group = path / f"{PREFIX}r{rank}-{pid}"
    group.mkdir()
    swap = group / ("memory.swappiness" if (group / "memory.swappiness").exists() else "memory.swap.max")
    if swap.exists():
        swap.write_text("0")
    (group / "cgroup.procs").write_text(str(pid))
    return group


def remove_tree(path: Path, *, deadline_s: float = 10.0) -> list[str]:
    """Remove a trial's group and its children (deepest first); what could not be
    removed, and why. A group empties a moment after its last process was reaped, so a
    busy one is tried again until the deadline."""
    if not path.name.startswith(PREFIX) or ROOT not in Path(os.path.realpath(path)).parents:
        return [f"{path}: not a group ftbench created; left alone"]
    problems = []
    for child in sorted((p for p in path.iterdir() if p.is_dir()), key=lambda p: p.name) if path.is_dir() else []:
        problems += remove_tree(child, deadline_s=deadline_s)
    end = time.monotonic() + deadline_s
    while path.is_dir():
        try:
            path.rmdir()
        except FileNotFoundError:
            break
        except OSError as err:
            if err.errno != errno.EBUSY or time.monotonic() > end:
                problems.append(f"{path}: {err.strerror} ({_procs(path)})")
                break
            time.sleep(0.05)
    return problems


def _procs(group: Path) -> str:
    try:
        pids = (group / "cgroup.procs").read_text().split()
    except OSError:
        return "its processes cannot be read"
    return f"processes {', '.join(pids)} still in it" if pids else "no process left in it"


def read_usage(group: Path, h: Hierarchy) -> int:
    return int((group / h.usage).read_text())


def set_limit(group: Path, h: Hierarchy, limit: int | None) -> bool:
    """Set (None: lift) the group's limit; False where the kernel refused a limit below
    what it could reclaim (v1 answers EBUSY rather than killing)."""
    text = ("max" if h.version == 2 else "-1") if limit is None else str(limit)
    try:
        (group / h.limit).write_text(text)
    except OSError as err:
        if err.errno in (errno.EBUSY, errno.EINVAL):
            return False
        raise
    return True


class Oom:
    """The kernel's OOM killer ends the target, by a real limit on its memory group.

    The limit is set to what the group holds at the moment of injection, and then
    follows its usage down (every :data:`RATCHET_S`) for as long as the fault holds:
    a training step frees and allocates again, and the first allocation past the
    lowest point it reached is one the kernel cannot grant. The kernel then picks the
    largest process of the group (the rank; a helper it forked shares its group) and
    SIGKILLs it; its log says so, and the harness records that record (``oom_kill``).
    After ``duration_s`` the limit is lifted whatever happened (a rank that held still
    was not ended, and ``report`` says so)."""

    def __init__(self, *, duration_s: float) -> None:
        self.duration_s: float | None = duration_s
        self.report: dict[str, Any] = {}
        self._groups: dict[int, Path] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._h = hierarchy()

    def inject(self, target: Target) -> dict[str, Any]:
        h = self._h
        if h is None:
            raise RuntimeError("oom: no memory cgroup hierarchy here")
        limits = {}
        for pid in target.pids:
            group = h.own(pid)
            if not group.name.startswith(PREFIX):
                raise RuntimeError(f"oom: process {pid} is not in a group of its own ({group}): it did not join one")
            self._groups[pid] = group
            limits[pid] = read_usage(group, h)
            set_limit(group, h, limits[pid])
        self._thread = threading.Thread(target=self._ratchet, args=(h, limits), name="oom-ratchet", daemon=True)
        self._thread.start()
        return {
            "mechanism": f"memory cgroup v{h.version} limit ({h.limit}) at the group's usage; the kernel's OOM killer",
            "cgroups": [str(g) for g in self._groups.values()],
            "limit_bytes": list(limits.values()),
        }

    def _ratchet(self, h: Hierarchy, limits: dict[int, int]) -> None:
        """Lower each limit to the group's usage whenever that falls below it."""
        while not self._stop.wait(RATCHET_S):
            for pid, group in self._groups.items():
                if not alive(pid):
                    continue
                try:
                    usage = read_usage(group, h)
                    if usage < limits[pid] and set_limit(group, h, usage):
                        limits[pid] = usage
                except OSError:
                    continue  # the group went with its process
        self.report = {"final_limit_bytes": list(limits.values())}

    def undo(self) -> None:
        """Lift the limits of the groups still there (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._h is None or not self._groups:
            return
        survived = [pid for pid in self._groups if alive(pid)]
        for group in self._groups.values():
            try:
                set_limit(group, self._h, None)
            except OSError:
                pass  # removed with its process's trial
        self.report |= {"survived": survived}
        self._groups = {}


def main(argv: list[str]) -> int:
    """``python -m injectors.cgroup remove PATH``: an undo record's way to remove a
    trial's groups when the harness could not."""
    if len(argv) != 2 or argv[0] != "remove":
        sys.stderr.write("usage: python -m injectors.cgroup remove PATH\n")
        return 2
    problems = remove_tree(Path(argv[1]))
    sys.stderr.writelines(f"{p}\n" for p in problems)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
