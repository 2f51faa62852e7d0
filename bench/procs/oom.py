"""Which processes the kernel's OOM killer ended: read from the kernel's log.

A rank the OOM killer ends dies of SIGKILL, exactly like a rank a ``kill`` fault ends,
so its exit code cannot tell the two apart. The kernel says so in its log
("Out of memory: Killed process PID (...)", "Memory cgroup out of memory: Killed process
PID ..."), which ``/dev/kmsg`` serves record by record to root. Records older than the
trial are ignored (a pid may have been used before), by their stamp: microseconds of the
kernel's clock since boot, the clock CLOCK_MONOTONIC counts too (to within the kernel's
bookkeeping; a second of slack is allowed). The two drift apart by milliseconds (13 ms
on this project's machine), so a kill's moment is mapped onto CLOCK_MONOTONIC by an
offset measured when it is needed (:func:`kernel_offset_ns`), not assumed.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterable

KMSG = "/dev/kmsg"
_KILLED = re.compile(rb"Killed process (\d+)")
SLACK_NS = 1_000_000_000


def oom_killed(pids: Iterable[int], *, since_ns: int = 0) -> dict[int, str]:
    """pid -> the kernel's message, for each of ``pids`` the OOM killer ended after
    ``since_ns`` (CLOCK_MONOTONIC); {} where the log cannot be read (not root)."""
    return {pid: message for pid, (_, message) in oom_records(pids, since_ns=since_ns).items()}


def oom_records(pids: Iterable[int], *, since_ns: int = 0) -> dict[int, tuple[int, str]]:
    """pid -> (the record's stamp in ns of the kernel's clock, its message), as
    :func:`oom_killed`: the stamp tells when the kill happened (an ``oom`` fault's limit
    is set earlier; the kill comes at the target's next allocation past it)."""
    wanted = set(pids)
    found: dict[int, tuple[int, str]] = {}
    if not wanted:
        return found
    try:
        fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return found
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break  # the end of the log
            except OSError:
                continue  # EPIPE: records were overwritten while reading; go on
            if not record:
                break
            head, _, text = record.partition(b";")
            m = _KILLED.search(text)
            if m is None or int(m[1]) not in wanted:
                continue
            fields = head.split(b",")
            stamp_ns = int(fields[2]) * 1000 if len(fields) > 2 and fields[2].isdigit() else 0
            if stamp_ns + SLACK_NS >= since_ns:
                found[int(m[1])] = (stamp_ns, text.split(b"\n", 1)[0].decode(errors="replace").strip())
    finally:
        os.close(fd)
    return found


def kernel_offset_ns() -> int | None:
    """CLOCK_MONOTONIC minus the kernel log's clock, measured now: a record written to
    the log gets the kernel's stamp, read back, and the middle of the write is ours
    (the write takes microseconds). None where the log cannot be written (not root)."""
    try:
        fd = os.open(KMSG, os.O_RDWR | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        os.lseek(fd, 0, os.SEEK_END)  # past the records already there
        nonce = uuid.uuid4().hex[:12].encode()
        t0 = time.monotonic_ns()
        os.write(fd, b"<7>ftbench: clock probe " + nonce + b"\n")
        t1 = time.monotonic_ns()
        while True:  # the record is in the log once write() returned: no waiting
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                return None
            except OSError:
                continue  # EPIPE: records were overwritten while reading; go on
            head, _, text = record.partition(b";")
            fields = head.split(b",")
            if nonce in text and len(fields) > 2 and fields[2].isdigit():
                return (t0 + t1) // 2 - int(fields[2]) * 1000
    except OSError:
        return None
    finally:
        os.close(fd)
