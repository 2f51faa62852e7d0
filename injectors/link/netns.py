"""Network namespaces for link faults: one namespace per host, veths into a bridge.

Link faults need a link of each rank's own to break: on one host every rank shares the
loopback, and a firewall rule there hits everyone. So each host (a rank, or a group of
ranks standing for a host) gets a network namespace with ``eth0`` on a veth into a Linux
bridge that lives in a hub namespace; one more veth joins the root namespace to the bridge
so that the harness (which stays in the root namespace) reaches every host, e.g. the c10d
store living in one of them.

Addresses come from 198.18.0.0/15 (RFC 2544, reserved for benchmarking), one /24 per
topology, so that nothing ever talks to a real network. Every name starts with ``ftb``
and contains the topology's tag; that is how :func:`cleanup_all` finds the leftovers of a
killed run. The undo record is written *before* anything is created, so that a harness
killed half-way through :meth:`Topology.create` still leaves commands that revert it.

Layout for tag ``t1`` with two hosts::

    ns ftb-t1-hub : bridge ftbt1br, ports ftbt1h0, ftbt1h1, ftbt1rp
    ns ftb-t1-h0  : eth0 198.18.x.1/24   (peer ftbt1h0)
    ns ftb-t1-h1  : eth0 198.18.x.2/24   (peer ftbt1h1)
    root          : ftbt1r 198.18.x.254/24 (peer ftbt1rp)
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import ipaddress
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from injectors import undo
from injectors.link import nfqueue

PREFIX = "ftb"
NETNS_DIR = Path("/run/netns")
BENCH_NET = ipaddress.IPv4Network("198.18.0.0/15")
_LOCK = Path("/run/ftbench-netns.lock")
_CLONE_NEWNET = 0x40000000
_SIOCETHTOOL, _ETHTOOL_STSO = 0x8946, 0x1F
_TAG = re.compile(r"^[a-z0-9]{1,6}$")
T = TypeVar("T")


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
        sh(["tc", "-n", probe, "qdisc", "add", "dev", "pa", "root", "tbf", "rate", "1mbit", "burst", "32k",
            "latency", "50ms"])
    except CommandError as exc:
        return f"network namespaces are restricted here: {exc}"
    finally:
        sh(["ip", "netns", "del", probe], check=False)
    return None


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    """``h0``, ``h1``, ...: the host's index in the topology."""
    namespace: str
    address: str
    ifname: str
    """The host's interface inside its namespace (``eth0``; for GLOO_SOCKET_IFNAME)."""
    port: str
    """The bridge port (the veth's other end, in the hub namespace)."""


@dataclass(slots=True)
class Topology:
    tag: str
    hub: str
    bridge: str
    subnet: str
    hosts: tuple[Host, ...]
    root_address: str
    root_ifname: str
    wire_packets: bool = False
    _record: Path | None = field(default=None, repr=False)

    @classmethod
    def create(cls, tag: str, hosts: int, *, wire_packets: bool = False) -> Topology:
        """Build the namespaces, the bridge and the veths; undo all if any step fails.

        By default TCP hands 64 KiB TSO super-packets to the veths, as it does to a NIC
        with segmentation offload; a fault that acts per packet (loss, corruption) then
        hits one super-packet, a burst of up to ~45 wire packets (measured: 22 drops took
        1.1 MB), which is also what netem does on such a host. ``wire_packets=True`` turns
        TSO off on every eth0 (and the root veth), so the kernel segments in software and
        every queue, rule and qdisc sees MTU-sized packets like on the wire; the price is
        a slower clean link (2-rank gloo 1 MiB all_reduce here: 76-116 instead of 273-326
        steps/s). Record which one a run used.
        """
        if not _TAG.match(tag):
            raise ValueError(f"topology tag {tag!r}: expected 1-6 characters of [a-z0-9] (see tag_for)")
        if not 1 <= hosts <= 253:
            raise ValueError(f"topology hosts={hosts}: expected 1..253")
        reason = available()
        if reason:
            raise Unavailable(reason)
        with _locked():
            if any(n.startswith(f"{PREFIX}-{tag}-") for n in namespaces()):
                raise RuntimeError(f"a topology tagged {tag!r} already exists (ip netns list)")
            subnet = _free_subnet(tag)
            net = list(subnet.hosts())
            topo = cls(
                tag=tag, hub=f"{PREFIX}-{tag}-hub", bridge=f"{PREFIX}{tag}br", subnet=str(subnet),
                hosts=tuple(Host(f"h{i}", f"{PREFIX}-{tag}-h{i}", str(net[i]), "eth0", f"{PREFIX}{tag}h{i}")
                            for i in range(hosts)),
                root_address=str(net[-1]), root_ifname=f"{PREFIX}{tag}r", wire_packets=wire_packets,
            )
            topo._record = undo.register(run_id(), f"network topology {tag}", topo._teardown_commands())
            try:
                topo._build()
            except BaseException:
                topo.destroy()
                raise
        return topo

    def _build(self) -> None:
        hub, br = self.hub, self.bridge
        sh(["ip", "netns", "add", hub])
        sh(["ip", "-n", hub, "link", "set", "lo", "up"])
        sh(["ip", "-n", hub, "link", "add", br, "type", "bridge"])
        sh(["ip", "-n", hub, "link", "set", br, "up"])
        for h in self.hosts:
            sh(["ip", "netns", "add", h.namespace])
            sh(["ip", "-n", h.namespace, "link", "set", "lo", "up"])
            sh(["ip", "-n", hub, "link", "add", h.port, "type", "veth", "peer", "name", h.ifname,
                "netns", h.namespace])
            sh(["ip", "-n", hub, "link", "set", h.port, "master", br, "up"])
            sh(["ip", "-n", h.namespace, "addr", "add", f"{h.address}/24", "dev", h.ifname])
            if self.wire_packets:
                run_in(h.namespace, _tso_off, h.ifname)
            sh(["ip", "-n", h.namespace, "link", "set", h.ifname, "up"])
        rport = f"{self.root_ifname}p"
        sh(["ip", "link", "add", self.root_ifname, "type", "veth", "peer", "name", rport, "netns", hub])
        sh(["ip", "-n", hub, "link", "set", rport, "master", br, "up"])
        sh(["ip", "addr", "add", f"{self.root_address}/24", "dev", self.root_ifname])
        if self.wire_packets:
            _tso_off(self.root_ifname)
        sh(["ip", "link", "set", self.root_ifname, "up"])

    def _teardown_commands(self) -> list[list[str]]:
        """What reverts this topology from another process (the undo record): the full
        cleanup (processes and daemons inside too), then plain ``ip`` in case Python cannot."""
        return [["env", f"PYTHONPATH={nfqueue.PACKAGE_ROOT}", sys.executable, "-m", "injectors.link.netns", "cleanup",
                 self.tag], ["ip", "link", "del", self.root_ifname],
                *(["ip", "netns", "del", h.namespace] for h in self.hosts), ["ip", "netns", "del", self.hub]]

    def host(self, name_or_index: str | int) -> Host:
        key = f"h{name_or_index}" if isinstance(name_or_index, int) else name_or_index
        for h in self.hosts:
            if key in (h.name, h.namespace):
                return h
        raise KeyError(f"topology {self.tag} has no host {name_or_index!r}")

    def destroy(self) -> list[str]:
        """Remove everything of this topology (idempotent); returns what was removed.

        Processes still inside its namespaces (ranks, queue daemons) are killed first:
        they would keep a deleted namespace, and its veths, alive until they exit.
        """
        removed = cleanup_all(tag=self.tag)
        if self._record is not None:
            undo.forget(self._record)
            self._record = None
        return removed

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def tag_for(text: str) -> str:
    """A valid 6-character tag derived from any text (a run id, a trial id)."""
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def namespaces() -> list[str]:
    """Names of the named network namespaces (``ip netns list``)."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def locate(namespace: str) -> tuple[str, str]:
    """(hub namespace, bridge port) of a host namespace made by :class:`Topology`.

    Link faults that act on traffic *towards* a host (netem, tbf) put their qdisc on the
    bridge port, the egress that feeds the host's eth0.
    """
    m = re.fullmatch(rf"{PREFIX}-([a-z0-9]{{1,6}})-h(\d+)", namespace)
    if not m:
        raise ValueError(f"{namespace!r} is not a host namespace of an ftbench topology")
    return f"{PREFIX}-{m[1]}-hub", f"{PREFIX}{m[1]}h{m[2]}"


def enter(namespace: str) -> None:
    """Move the calling thread into a named network namespace (setns(2) on /run/netns/NAME).

    Meant for a freshly forked, single-threaded child before it opens any socket (a
    rank before torch initialises networking): there the thread is the process. Sockets
    belong to the namespace they were created in, so the order matters. Python 3.11 has
    no ``os.setns``, hence ctypes.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(NETNS_DIR / namespace, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({NETNS_DIR / namespace}): {os.strerror(err)}")
    finally:
        os.close(fd)


def run_in(namespace: str, fn: Callable[..., T], *args: Any, timeout_s: float = 30.0, **kwargs: Any) -> T:
    """Call ``fn(*args, **kwargs)`` in a short-lived thread that entered ``namespace``.

    setns(2) moves only the calling thread, so the caller's own namespace is untouched;
    sockets ``fn`` creates live in ``namespace`` (the harness' way to reach a host
    without the root veth, and the tests' way to run a client).
    """
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            enter(namespace)
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=body, name=f"in-{namespace}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise TimeoutError(f"{getattr(fn, '__name__', fn)} in {namespace} still running after {timeout_s} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def cleanup_all(tag: str | None = None) -> list[str]:
    """Remove every leftover of ftbench's link faults (of one tag, or of any run).

    Queue daemons and other processes inside ftbench namespaces, the namespaces, root
    links named ftb*, iptables rules commented ftb* and chains named ftb* in the root
    namespace, nftables tables named ftb*. Qdiscs and rules inside a namespace go with
    it. Returns what was removed.
    """
    if tag:
        ns_re, link_re = re.compile(rf"{PREFIX}-{tag}-(hub|h\d+)"), re.compile(rf"{PREFIX}{tag}(br|h\d+|rp?)")
    else:
        ns_re, link_re = re.compile(rf"{PREFIX}-.*"), re.compile(rf"{PREFIX}.*")
    mine = (lambda text: tag in text) if tag else (lambda text: True)
    ours = [n for n in namespaces() if ns_re.fullmatch(n)]
    removed = [f"queue daemon {pid}" for pid in nfqueue.stop_daemons(namespaces=ours if tag else None)]
    for ns in ours:
        pids = [int(p) for p in sh(["ip", "netns", "pids", ns], check=False).stdout.split()]
        for pid in pids:
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                    removed.append(f"process {pid} in {ns}")
                except ProcessLookupError:
                    pass
    for ns in ours:
        if sh(["ip", "netns", "del", ns], check=False).returncode == 0:
            removed.append(f"namespace {ns}")
    for line in sh(["ip", "-o", "link", "show"], check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if line.count(":") >= 2 else ""
        if link_re.fullmatch(name) and sh(["ip", "link", "del", name], check=False).returncode == 0:
            removed.append(f"link {name}")
    removed += _clean_root_firewall(mine)
    return removed


def _clean_root_firewall(mine: Callable[[str], bool]) -> list[str]:
    """Delete ftb-commented iptables rules and ftb* chains/tables in the root namespace."""
    removed: list[str] = []
    if shutil.which("iptables-save"):
        table = "filter"
        chains: list[tuple[str, str]] = []
        for line in sh(["iptables-save"], check=False).stdout.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":" + PREFIX) and mine(line):
                chains.append((table, line[1:].split()[0]))
            elif line.startswith("-A ") and re.search(rf"--comment \"?{PREFIX}", line) and mine(line):
                rule = shlex.split(line)[1:]
                if sh(["iptables", "-w", "5", "-t", table, "-D", *rule], check=False).returncode == 0:
                    removed.append(f"iptables -t {table} {line}")
        for table, chain in chains:
            sh(["iptables", "-w", "5", "-t", table, "-F", chain], check=False)
            if sh(["iptables", "-w", "5", "-t", table, "-X", chain], check=False).returncode == 0:
                removed.append(f"iptables chain {table}/{chain}")
    if shutil.which("nft"):
        for line in sh(["nft", "list", "tables"], check=False).stdout.splitlines():
            parts = line.split()  # "table inet ftbxyz"
            if (len(parts) == 3 and parts[2].startswith(PREFIX) and mine(parts[2])
                    and sh(["nft", "delete", "table", parts[1], parts[2]], check=False).returncode == 0):
                removed.append(f"nft table {parts[1]} {parts[2]}")
    return removed


def _tso_off(ifname: str) -> None:
    """ETHTOOL_STSO off via ioctl(SIOCETHTOOL) in the calling thread's namespace.

    Not ``ip link set gso_max_segs 1``: that makes TCP build one-MSS skbs itself, and gloo
    then ran at 9-16 steps/s instead of ~300 (timer-bound); software GSO keeps TCP's
    large sends and segments just before the device. Not ethtool: one package less.
    """
    arg = ctypes.create_string_buffer(struct.pack("II", _ETHTOOL_STSO, 0), 8)
    ifr = bytearray(struct.pack("16sP", ifname.encode(), ctypes.addressof(arg)).ljust(40, b"\0"))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            fcntl.ioctl(s.fileno(), _SIOCETHTOOL, ifr)
        except OSError as exc:
            raise CommandError(["ioctl", "SIOCETHTOOL", "ETHTOOL_STSO", ifname, "off"], str(exc)) from exc


def _free_subnet(tag: str) -> ipaddress.IPv4Network:
    """The tag's /24 in 198.18.0.0/15, or the next one no root address uses yet."""
    used: set[ipaddress.IPv4Network | ipaddress.IPv6Network] = set()
    for line in sh(["ip", "-4", "-o", "addr", "show"]).stdout.splitlines():
        m = re.search(r"inet (\S+)", line)
        if m:
            used.add(ipaddress.ip_interface(m[1]).network)
    subnets = list(BENCH_NET.subnets(new_prefix=24))
    start = int(hashlib.sha256(tag.encode()).hexdigest(), 16) % len(subnets)
    for k in range(len(subnets)):
        candidate = subnets[(start + k) % len(subnets)]
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise RuntimeError("every /24 of 198.18.0.0/15 is in use in the root namespace")


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """A host-wide lock, so two harnesses never pick the same subnet at once."""
    with open(_LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def main(argv: list[str]) -> int:
    """``python -m injectors.link.netns cleanup [TAG]``: what an undo record or an operator runs."""
    if not argv or argv[0] != "cleanup":
        print("usage: python -m injectors.link.netns cleanup [TAG]")
        return 2
    for item in cleanup_all(tag=argv[1] if len(argv) > 1 else None):
        print("removed", item)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
