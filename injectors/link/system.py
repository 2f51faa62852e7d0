"""The host's networking tools, as link faults use them: commands with deadlines, errors
that name the command, and a probe of whether namespaces work here at all.

Every name ftbench creates starts with :data:`PREFIX`; that is how leftovers are found.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

PREFIX = "ftb"
NETNS_DIR = Path("/run/netns")


class CommandError(RuntimeError):
    """A system command failed; the message names the command and quotes its stderr."""

    def __init__(self, argv: Sequence[str], detail: str) -> None:
        self.argv = list(argv)
        super().__init__(f"`{shlex.join(argv)}` failed: {detail}")


class Unavailable(RuntimeError):
    """Link faults cannot be had here; the message says why (for a skipped scenario)."""


def sh(argv: Sequence[str], *, timeout_s: float = 15.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command with a deadline; a failure raises :class:`CommandError` naming it."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError as exc:
        raise CommandError(argv, f"{argv[0]} is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandError(argv, f"no answer within {timeout_s} s") from exc
    if check and done.returncode != 0:
        raise CommandError(argv, f"exit {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
    return done


def run_id() -> str:
    """The run that owns what is created now (undo records are filed under it)."""
    return os.environ.get("FTBENCH_RUN", "adhoc")


@functools.cache
def available() -> str | None:
    """None when namespaces, veths, a bridge, iptables and tc work here, else one line why.

    Probed once per process by building (and removing) a throwaway namespace, because a
    missing capability (a container without CAP_NET_ADMIN, a kernel without veth) only
    shows when one tries.
    """
    if os.geteuid() != 0:
        return f"link faults need root (network namespaces, iptables, tc); running as uid {os.geteuid()}"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("iptables", "iptables")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install -y {package})"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    try:
        sh(["ip", "netns", "add", probe])
    except CommandError as exc:
        return f"cannot create a network namespace: {exc}"
    try:
        sh(["ip", "-n", probe, "link", "set", "lo", "up"])
        sh(["ip", "-n", probe, "link", "add", "pa", "type", "veth", "peer", "name", "pb"])
        sh(["ip", "-n", probe, "link", "add", "pbr", "type", "bridge"])
        sh(["ip", "netns", "exec", probe, "iptables", "-w", "5", "-A", "INPUT", "-j", "DROP"])
        sh(
            [
                "tc",
                "-n",
                probe,
                *["qdisc", "add", "dev", "pa", "root", "tbf", "rate", "1mbit", "burst", "32k", "latency", "50ms"],
            ]
        )
    except CommandError as exc:
        return f"network namespaces are restricted here: {exc}"
    finally:
        sh(["ip", "netns", "del", probe], check=False)
    return None


def namespaces() -> list[str]:
    """Names of the named network namespaces (``ip netns list``)."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def tag_for(text: str) -> str:
    """A valid 6-character tag derived from any text (a run id, a trial id)."""
    return hashlib.sha256(text.encode()).hexdigest()[:6]
