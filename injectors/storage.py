"""The ``storage`` fault: the checkpoint target fills up while a stack saves.

A trial with a storage fault gets a size-limited tmpfs mounted over its checkpoint
directory before its ranks start (:meth:`Volume.mount`). The fault fills what is left
of it with a filler file (:class:`Fill`), so that the next write there fails with
ENOSPC, as on a full shared file system; ``undo`` deletes the filler and the space is
back. The mount goes when the trial ends, and an undo record unmounts it if the
harness dies first (``python -m injectors.storage unmount PATH``).

What the stack does on ENOSPC is its own behaviour: a save that raises may crash its
rank, or be caught and retried; ftbench records what happens. A *slow* file system is
not offered: a tmpfs has no block device to throttle, and cgroup v1's ``blkio``
throttling of a loop device holds only for direct I/O (a buffered write is charged to
the kernel's writeback, not to the writer), which checkpoint writers do not use.
"""

from __future__ import annotations

import errno
import functools
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, ClassVar

from injectors.base import Target

SOURCE = "ftb-ckpt"
"""The mount's source name: what ``findmnt`` and ``/proc/mounts`` show, and how
:func:`unmount` knows the mount is ftbench's."""
FILLER = ".ftbench-filler"
"""Filler files are named FILLER-<8 hex>, one or more per firing."""
CHUNK = 1 << 20


def _run(argv: list[str]) -> str:
    """Run a mount command with a deadline; its error text ("" on success)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"`{' '.join(argv)}`: {err}"
    return "" if done.returncode == 0 else f"`{' '.join(argv)}`: {done.stderr.strip() or done.returncode}"


@functools.cache
def unavailable() -> str | None:
    """None when this process can mount a size-limited tmpfs, else one line why (probed
    once per process: a container without CAP_SYS_ADMIN only shows when one tries)."""
    if os.geteuid() != 0:
        return f"a size-limited checkpoint file system needs root (mount -t tmpfs); running as uid {os.geteuid()}"
    with tempfile.TemporaryDirectory(prefix="ftb-probe-") as probe:
        why = _run(["mount", "-t", "tmpfs", "-o", "size=1m", SOURCE, probe])
        if why:
            return f"cannot mount a tmpfs: {why}"
        why = _run(["umount", probe])
        return f"cannot unmount a tmpfs: {why}" if why else None


def mounted(path: Path) -> bool:
    """Whether ftbench's tmpfs is mounted at ``path``."""
    target = str(path.resolve())
    with open("/proc/self/mounts") as fh:
        return any(line.split()[:2] == [SOURCE, target] for line in fh)


def unmount(path: Path) -> str:
    """Unmount ftbench's tmpfs at ``path`` (nothing if none is there); why not ("" if done)."""
    if not mounted(path):
        return ""
    return _run(["umount", str(path)])


class Volume:
    """A trial's checkpoint directory as a tmpfs of ``size_bytes``.

    The harness mounts one per trial and the trial's storage faults fill it; the
    injector finds it here (:attr:`current`), as the harness runs one trial at a time."""

    current: ClassVar[Volume | None] = None

    def __init__(self, path: Path, size_bytes: int) -> None:
        self.path = path
        self.size_bytes = size_bytes
        self.fills: list[Fill] = []
        """Storage firings holding the file system full now."""

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        why = _run(["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes},mode=0755", SOURCE, str(self.path)])
        if why:
            raise OSError(errno.EPERM, f"checkpoint file system: {why}")
        Volume.current = self

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def close(self) -> str:
        """Unmount; why not ("" if done). What the stack wrote there goes with it."""
        if Volume.current is self:
            Volume.current = None
        return unmount(self.path)


class Fill:
    """Fill the trial's checkpoint file system up to ``leave_mb`` free, for ``duration_s``.

    The filler is written (not merely allocated), so that the space is really taken as
    a stack's own files would take it; the next save that needs more than what is left
    fails with ENOSPC. ``undo`` deletes it. Firings that overlap keep the file system
    full until the last of them ends: one that ends while others hold hands the filling
    on to the newest of them (each firing owns its own files)."""

    def __init__(self, *, duration_s: float, size_mb: int, leave_mb: float) -> None:
        self.duration_s: float | None = duration_s
        self.leave_bytes = int(leave_mb * CHUNK)
        self.report: dict[str, Any] = {}
        self._volume: Volume | None = None
        self._fillers: list[Path] = []

    def inject(self, target: Target) -> dict[str, Any]:
        volume = Volume.current
        if volume is None:
            raise RuntimeError("storage: the trial has no checkpoint file system of ftbench's mounted")
        self._volume = volume
        volume.fills.append(self)
        written = self._fill(volume)
        return {
            "mechanism": f"tmpfs of {volume.size_bytes} bytes over the checkpoint directory, filled by a file",
            "filled_bytes": written,
            "free_bytes": volume.free_bytes(),
            "checkpoint_dir": str(volume.path),
        }

    def _fill(self, volume: Volume) -> int:
        """Write a new filler file of this firing's until ``leave_mb`` is left; its size."""
        path = volume.path / f"{FILLER}-{uuid.uuid4().hex[:8]}"
        self._fillers.append(path)
        written = 0
        chunk = b"\0" * CHUNK
        with open(path, "wb") as fh:
            while (room := volume.free_bytes() - self.leave_bytes) > 0:
                try:
                    written += fh.write(chunk[: min(CHUNK, room)])
                    fh.flush()
                except OSError as err:
                    if err.errno != errno.ENOSPC:
                        raise
                    break
        return written

    def undo(self) -> None:
        """Delete this firing's fillers (idempotent): the space is back, unless another
        firing still holds, which then fills it again."""
        volume, self._volume = self._volume, None
        for path in self._fillers:
            path.unlink(missing_ok=True)
        self._fillers = []
        if volume is None:
            return
        volume.fills.remove(self)
        if volume.fills:
            volume.fills[-1]._fill(volume)


def main(argv: list[str]) -> int:
    """``python -m injectors.storage unmount PATH``: an undo record's way to remove a
    trial's checkpoint file system when the harness could not."""
    if len(argv) != 2 or argv[0] != "unmount":
        sys.stderr.write("usage: python -m injectors.storage unmount PATH\n")
        return 2
    why = unmount(Path(argv[1]))
    if why:
        sys.stderr.write(f"{why}\n")
    return 1 if why else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
