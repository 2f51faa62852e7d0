"""A Ray cluster of one node per host namespace, and what makes each node a machine.

Each node is ``ray start --block`` (so that one process stands for the node: its GCS,
raylet, agents and the workers below them are its descendants, and a host-down fault
takes them all), started by ``python -m bench.strategies.ray_train.cluster NETNS --
ray start ...``, which, before it executes ``ray start``:

- enters a mount namespace of its own with a fresh tmpfs on ``/tmp``: Ray keeps its
  session (sockets, logs, the ``session_latest`` link) under ``/tmp/ray``, and a node's
  ``/tmp`` is its own, as on a real machine; the tmpfs goes away with the node's last
  process, so a SIGKILLed harness leaves no Ray session behind, with nothing to clean;
- enters the host's network namespace: every server Ray starts (GCS, raylet, object
  manager, agents, workers) is reachable at the host's address only, never on the
  machine's own interfaces.

Every port is explicit (the same on every host: each host has its own network stack),
and so is the node's address (``--node-ip-address``) and its logical CPUs (one per
rank it is to hold). The trial's driver enters h0's two namespaces the same way
(:func:`enter_node`), as a driver runs on the head machine.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from injectors.link.netns import enter

GCS_PORT = 6379
"""``ray start --port``: the head's GCS, where the other nodes and the driver connect."""
PORTS: dict[str, int] = {
    "node-manager-port": 6380,
    "object-manager-port": 6381,
    "dashboard-agent-listen-port": 6382,
    "dashboard-agent-grpc-port": 6383,
    "metrics-export-port": 6384,
    "runtime-env-agent-port": 6385,
    "min-worker-port": 10002,
    "max-worker-port": 10999,
}
"""Every other port a node listens on, explicit (``ray start --<name>=<port>``)."""
HEAD_PORTS: dict[str, int] = {"port": GCS_PORT, "dashboard-port": 6386}
TMPFS_SIZE = "512m"
"""A node's ``/tmp`` (Ray's session: logs and sockets; tmpfs uses only what it holds)."""

STAGING = ("/mnt", "/media", "/srv", "/opt")
"""Existing directories, one of which briefly holds the machine's /tmp inside a node's
mount namespace while its private /tmp is assembled."""

_CLONE_NEWNS = 0x00020000
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000
_MNT_DETACH = 2


@dataclass(frozen=True, slots=True)
class Node:
    """One Ray node: a host of the trial's topology."""

    index: int
    namespace: str
    address: str
    cpus: int
    """Logical CPUs it declares: how many workers Ray may place on it."""

    @property
    def head(self) -> bool:
        return self.index == 0

    def ray_start(self, head_address: str) -> list[str]:
        """``ray start`` for this node, every address and port explicit."""
        ports = {**PORTS, **HEAD_PORTS} if self.head else PORTS
        args = [
            ray_executable(),
            "start",
            "--block",
            f"--node-ip-address={self.address}",
            f"--num-cpus={self.cpus}",
            "--num-gpus=0",
            "--disable-usage-stats",
            "--include-log-monitor=false",
            *(f"--{name}={port}" for name, port in ports.items()),
        ]
        if self.head:
            return [*args, "--head", "--include-dashboard=false"]
        return [*args, f"--address={head_address}:{GCS_PORT}"]

    def command(self, head_address: str, keep: Iterable[str] = ()) -> list[str]:
        """The node's process: this module's entry, then ``ray start`` in its place;
        ``keep``: entries of the machine's /tmp its processes must see (:func:`kept`), beside
        those the interpreter itself lives in (a checkout or a venv under /tmp)."""
        keeps = [f"--keep={name}" for name in sorted({*keep, *kept(interpreter_paths())})]
        return [sys.executable, "-m", __name__, self.namespace, *keeps, "--", *self.ray_start(head_address)]


def await_port(address: str, port: int, what: str, procs: Iterable[subprocess.Popen[bytes]], timeout_s: float) -> None:
    """Wait until ``address:port`` accepts a connection (from the root namespace, over the
    topology's bridge); refuse at once if a node process exited meanwhile."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a Ray node exited while {what} was awaited")
        try:
            socket.create_connection((address, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not answer at {address}:{port} within {timeout_s:.0f} s")


def ray_executable() -> str:
    """The ``ray`` command of this interpreter's environment."""
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def interpreter_paths() -> list[str]:
    """Where this interpreter and the code it runs live: its executable, its prefix, the
    working directory and PYTHONPATH. Ray's processes on a node run the same interpreter."""
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [os.getcwd(), sys.executable, sys.prefix, *extra]


def kept(paths: Iterable[str]) -> list[str]:
    """The entries of the machine's /tmp that these paths lie in (a results directory,
    a checkpoint directory, an interpreter under /tmp): they stay visible in a node's
    private /tmp."""
    names = set()
    for path in paths:
        parts = Path(os.path.abspath(path)).parts
        if len(parts) > 2 and parts[:2] == ("/", "tmp"):
            names.add(parts[2])
    return sorted(names)


def private_tmp(keep: Iterable[str] = ()) -> None:
    """A mount namespace of the calling (single-threaded) process's own, with a fresh
    tmpfs on /tmp; nothing it mounts propagates back. The entries ``keep`` of the
    machine's /tmp are bound into it (through a staging mount of the old /tmp on an
    existing directory, unmounted again: gVisor refuses a bind from /proc/self/fd)."""
    libc = _libc()
    _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    keep = list(keep)
    stage = next((d for d in STAGING if os.path.isdir(d)), "") if keep else ""
    if keep and not stage:
        raise OSError(f"no directory to stage /tmp on (one of {STAGING})")
    if stage:
        _check(libc.mount(b"/tmp", stage.encode(), None, _MS_BIND | _MS_REC, None), f"mount --rbind /tmp {stage}")
    options = f"size={TMPFS_SIZE},mode=1777".encode()
    _check(libc.mount(b"ftbench-ray", b"/tmp", b"tmpfs", 0, options), "mount tmpfs /tmp")
    for name in keep:
        source, target = f"{stage}/{name}", f"/tmp/{name}"
        if os.path.isdir(source):
            os.mkdir(target)
        else:
            Path(target).touch()
        _check(libc.mount(source.encode(), target.encode(), None, _MS_BIND | _MS_REC, None), f"bind {target}")
    if stage:
        _check(libc.umount2(stage.encode(), _MNT_DETACH), f"umount {stage}")


def enter_node(pid: int, namespace: str) -> None:
    """Enter the mount namespace of node process ``pid`` (its /tmp, where Ray's sockets
    are) and the host's network namespace: a freshly forked child, before exec."""
    libc = _libc()
    fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(libc.setns(fd, _CLONE_NEWNS), f"setns(/proc/{pid}/ns/mnt)")
    finally:
        os.close(fd)
    enter(namespace)


def main(argv: list[str]) -> None:
    """``NETNS [--keep=NAME]... -- COMMAND...``: a private /tmp (with the machine's
    /tmp/NAME), the host's network, then COMMAND."""
    if "--" not in argv or argv.index("--") < 1 or argv.index("--") == len(argv) - 1:
        raise SystemExit("usage: python -m bench.strategies.ray_train.cluster NETNS [--keep=NAME]... -- COMMAND...")
    split = argv.index("--")
    namespace, options, command = argv[0], argv[1:split], argv[split + 1 :]
    keep = [o.removeprefix("--keep=") for o in options if o.startswith("--keep=") and "/" not in o]
    private_tmp(keep)
    enter(namespace)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
