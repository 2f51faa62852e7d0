"""Process hygiene: every process a trial starts dies with it, and with the harness.

Three mechanisms, each covering what the others cannot:

1. ``PR_SET_PDEATHSIG``: a process started by the harness (or by the forkserver) is sent
   SIGKILL by the kernel the moment its parent dies, even when the parent was SIGKILLed.
2. A marker in the environment: every process of a run inherits ``FTBENCH_RUN=<id>``
   (exec'd programs such as the torchrun agent and its workers keep it), so the run's
   processes can be found in ``/proc`` even after they were re-parented to init.
3. The guard (:mod:`bench.procs.guard`), a small process outside the harness' process tree
   that sweeps the marker when the harness disappears without cleaning up.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

# Re-exported: the harness and its tools read processes through hygiene.
from injectors.procfs import alive as alive
from injectors.procfs import stat_fields as stat_fields

MARKER = "FTBENCH_RUN"
_PR_SET_PDEATHSIG = 1


def set_pdeathsig(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies.

    If the parent is already gone (it died between our fork and this call), exit now:
    the signal would never come.
    """
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent or parent == 1:
        os._exit(1)


def redirect_output(path: str | Path) -> None:
    """Send this process's stdout and stderr (C++ logs included) to a file: what a
    rank, the store or a replica prints belongs beside its event log, not on the console."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


EXEC_SETTLE_S = 0.05
"""How long :func:`marked` looks again at a process that reads as having no environment:
one inside ``execve(2)`` (its old memory given up, the new environment not yet set up)
does, and a parent's ``Popen`` can return in that window (a fifth of the time here)."""
_PF_KTHREAD = 0x00200000


def environ(pid: int) -> bytes | None:
    """The environment ``pid`` was executed with; None once it is gone."""
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None


def settling(pid: int, env: bytes | None) -> bool:
    """Whether ``env``, just read from ``pid``, may not be its environment yet: it is
    empty and ``pid`` a live user process (no kernel thread, no zombie), which is what
    one inside ``execve(2)`` looks like."""
    if env != b"":
        return False
    fields = stat_fields(pid)
    return len(fields) > 6 and fields[0] not in (b"Z", b"X") and not int(fields[6]) & _PF_KTHREAD


def marked() -> dict[int, str]:
    """pid -> run id of every process whose environment at exec carried the marker."""
    found = {}
    envs = {int(e.name): environ(int(e.name)) for e in Path("/proc").iterdir() if e.name.isdigit()}
    unsettled = [pid for pid, env in envs.items() if settling(pid, env)]
    deadline = time.monotonic() + EXEC_SETTLE_S
    while unsettled and time.monotonic() < deadline:
        time.sleep(0.001)
        for pid in list(unsettled):
            env = environ(pid)
            if not settling(pid, env):
                envs[pid] = env
                unsettled.remove(pid)
    for pid, env in envs.items():
        run = run_of(env or b"")
        if run is not None:
            found[pid] = run
    return found


def run_of(env: bytes) -> str | None:
    """The run id an environment (``/proc/PID/environ``) carries, if any."""
    prefix = f"{MARKER}=".encode()
    for item in env.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode(errors="replace")
    return None


def marked_pids(run_id: str) -> list[int]:
    """Live processes of one run."""
    return [pid for pid, run in marked().items() if run == run_id and alive(pid)]


def kill_all(pids: Iterable[int], *, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL every pid and wait until none is alive; returns those that outlived the wait.

    SIGKILL also ends stopped (SIGSTOP) processes, so a stalled rank cannot survive it.
    Zombies are the parents' to reap: they hold no resources but a pid.
    """
    pids = [p for p in set(pids) if p != os.getpid()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + timeout_s
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = [p for p in left if alive(p)]
    return left


def sweep(run_id: str, *, keep: Iterable[int] = (), timeout_s: float = 10.0) -> list[int]:
    """Kill every process of run ``run_id`` except ``keep``; returns pids that survived."""
    spared = set(keep) | {os.getpid()}
    deadline = time.monotonic() + timeout_s
    while True:
        # A process listed a moment ago may have forked since (an agent restarting its
        # workers): sweep again until a listing comes back empty.
        targets = [p for p in marked_pids(run_id) if p not in spared]
        left = kill_all(targets, timeout_s=max(0.0, deadline - time.monotonic()))
        if not targets or left or time.monotonic() >= deadline:
            return left
