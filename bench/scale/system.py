"""What the operating system says about a scale point: CPU time, bytes on the wire, the
limits that bound N on one machine, and a resolver that does not stall clients.

- **CPU time** of a process and all its threads: ``utime + stime`` of ``/proc/PID/stat``,
  in clock ticks (10 ms at the usual 100 Hz): :data:`CPU_RESOLUTION_S`.
- **Service time of the coordinator's threads** (:func:`service`): the scheduler's own
  accounts, ``/proc/PID/task/TID/schedstat``, in nanoseconds: the time each thread ran
  on a CPU, and the time it was runnable but waiting for one. Their sum is how long the
  coordinator was busy (serving, or ready to serve and held off by the participants'
  work on the same cores); the first alone is what its work needs of a CPU, which is
  what a cluster's coordinator host would spend, and it resolves a point of a few
  milliseconds where clock ticks do not.
- **Bytes served**: the kernel's own counters of each TCP connection on the
  coordinator's port (``bytes_sent`` less ``bytes_retrans``, ``bytes_received``), read with ``ss``
  (netlink ``tcp_info``), so what a coordinator wrote to its clients is counted whatever
  system calls it wrote with (``/proc/PID/io`` misses ``send``/``recv``). A connection
  closed before the reading is not counted: readings are taken while every participant
  is connected.
- **Limits**: descriptors (``RLIMIT_NOFILE``), ephemeral ports (every client connection
  to one address and port takes one), thread ids (``kernel.pid_max``: every thread of
  every process takes one, and each participant is a thread), memory.
- **The resolver**: torch's ``TCPStore`` client looks its server's address up in
  reverse (``getnameinfo``) before it connects, and a server listening on every interface
  looks up each client it accepts, in its one event-loop thread. glibc does not answer a
  v4-mapped loopback address (``::ffff:127.0.0.1``) from ``/etc/hosts`` and asks the
  DNS server; the DNS server of this project's machines drops queries that come in a
  burst, and glibc waits its 5 s timeout before it tries again (docs/scale.md). To
  measure the coordinators and not that, the benchmark's processes may run in a mount
  namespace of their own whose ``resolv.conf`` names a loopback address where no DNS
  server listens: a lookup fails at once, as it does where ``/etc/hosts`` has the
  name, and the clients log that the name is unknown.
"""

from __future__ import annotations

import ctypes
import os
import re
import resource
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from injectors.procfs import stat_fields

CLOCK_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
CPU_RESOLUTION_S = CLOCK_TICK_S
"""Resolution of the CPU times recorded (one clock tick)."""

_BYTES = re.compile(rb"\b(bytes_sent|bytes_retrans|bytes_received|data_segs_in|data_segs_out):(\d+)")


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` and all its threads; None once it is gone."""
    fields = stat_fields(pid)
    if len(fields) < 13:
        return None
    return (int(fields[11]) + int(fields[12])) * CLOCK_TICK_S


@dataclass(frozen=True, slots=True)
class Service:
    """The scheduler's account of a process's threads, summed (nanoseconds)."""

    run_ns: int
    """On a CPU."""
    wait_ns: int
    """Runnable, waiting for a CPU."""
    threads: int


def service(pid: int) -> Service | None:
    """Summed ``schedstat`` of every thread of ``pid``; None once it is gone or where the
    kernel keeps no such account. A thread that ends in between takes its part with it:
    a coordinator's serving threads live as long as it does."""
    run = wait = count = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            parts = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
        except OSError:
            continue
        if len(parts) < 2:
            continue
        run, wait, count = run + int(parts[0]), wait + int(parts[1]), count + 1
    return Service(run, wait, count) if count else None


@dataclass(frozen=True, slots=True)
class Wire:
    """The established TCP connections on a server's port, as the kernel counts them."""

    connections: int
    sent: int
    """Bytes the server sent, retransmissions not counted twice (acknowledgements lag
    by a delayed ACK, so ``bytes_acked`` would miss the last replies)."""
    received: int
    segments_in: int = 0
    """Segments that carried data to the server (``data_segs_in``): a client's request
    is one write, so about one segment a request; writes the client's kernel coalesced
    (a burst of ``set``s, which get no reply) count once, a request larger than a
    segment (64 kB on loopback) more than once."""
    segments_out: int = 0
    """Segments that carried data from it (``data_segs_out``): replies and notifications."""


def wire(port: int) -> Wire | None:
    """Connections and bytes on local port ``port`` (None where ``ss`` is missing)."""
    ss = shutil.which("ss")
    if ss is None:
        return None
    out = subprocess.run(
        [ss, "-tinH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        timeout=60,
        check=False,
    ).stdout
    totals = dict.fromkeys((b"bytes_sent", b"bytes_retrans", b"bytes_received", b"data_segs_in", b"data_segs_out"), 0)
    conns = 0
    for line in out.splitlines():
        if not line[:1].isspace():
            conns += 1
            continue
        for m in _BYTES.finditer(line):
            totals[m.group(1)] += int(m.group(2))
    sent = totals[b"bytes_sent"] - totals[b"bytes_retrans"]
    return Wire(
        connections=conns,
        sent=sent,
        received=totals[b"bytes_received"],
        segments_in=totals[b"data_segs_in"],
        segments_out=totals[b"data_segs_out"],
    )


# --- limits --------------------------------------------------------------------------


def fd_limit() -> int:
    """Descriptors a process may hold (the soft RLIMIT_NOFILE, raised to the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return int(hard if hard != resource.RLIM_INFINITY else soft)


def raise_fd_limit() -> None:
    """Take the hard limit of descriptors as this process's soft one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


DESCRIPTORS = 1 << 17
"""Descriptors a sweep's processes may hold where root can raise the limit: the membership
coordinator at 16,384 holds 32,768 connections (two a member), over this machine's 20,000."""


def raise_fd_hard_limit() -> str:
    """As root, raise this process's hard (and soft) limit of descriptors to DESCRIPTORS
    (at most ``fs.nr_open``), for it and every process it starts; a limit of this process
    only, not the machine's. Returns what it did, or why not."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        nr_open = int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        nr_open = hard
    want = min(DESCRIPTORS, nr_open)
    if hard >= want:
        return f"descriptors: {hard:,} already"
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
    except (OSError, ValueError) as err:
        return f"descriptors: {hard:,} (could not raise: {err})"
    return f"descriptors: {want:,} for this run's processes (raised from {hard:,}; root)"


def ephemeral_ports() -> int:
    """How many local ports a client connection can take (ip_local_port_range)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(high) - int(low) + 1
    except (OSError, ValueError):
        return 28_232  # Linux's default range, 32768-60999


def thread_ids() -> tuple[int, int]:
    """(kernel.pid_max, thread ids in use now): every thread of every process takes one."""
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = 32_768
    used = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                used += len(os.listdir(entry / "task"))
            except OSError:
                continue
    return pid_max, used


def memory_available() -> float:
    """Bytes of memory available now (MemAvailable)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float("inf")


# --- the resolver --------------------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
PORT_RANGE = (1024, 65535)
"""The ephemeral ports of the run's own loopback (the host's default range holds 28,232)."""


def own_network() -> str:
    """Move this thread (and every process it starts after) into a network namespace of
    its own: a loopback only, brought up, whose ephemeral port range is PORT_RANGE (a
    setting of that namespace alone). 16,384 members of two connections each need 32,768
    ports to one address and port; the host's range, and whatever else uses its loopback,
    stay as they are. Returns "" on success, else why it could not (nothing changed)."""
    import fcntl
    import socket
    import struct

    if os.geteuid() != 0:
        return "not root"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) != 0:
        return f"unshare(CLONE_NEWNET): {os.strerror(ctypes.get_errno())}"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, _SIOCGIFFLAGS, struct.pack("16sH14x", b"lo", 0)))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))
    Path("/proc/sys/net/ipv4/ip_local_port_range").write_text(f"{PORT_RANGE[0]} {PORT_RANGE[1]}")
    return ""


_MS_BIND = 4096
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
RESOLV_CONF = "/etc/resolv.conf"
QUIET_RESOLVER = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
"""A resolver configuration whose server is a loopback address (with nothing listening
there, a query is refused at once)."""


def isolate_resolver(conf: Path) -> str:
    """Put this process (single-threaded, root) in a mount namespace of its own whose
    ``/etc/resolv.conf`` is ``conf``; every child inherits it. Returns "" on success,
    else why it could not (and nothing changed)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        return f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}"
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return f"mount --make-rprivate /: {os.strerror(ctypes.get_errno())}"
    if libc.mount(str(conf).encode(), RESOLV_CONF.encode(), None, _MS_BIND, None) != 0:
        return f"mount --bind {conf} {RESOLV_CONF}: {os.strerror(ctypes.get_errno())}"
    return ""
