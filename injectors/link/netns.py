"""Network namespaces for link faults: one namespace per host, veths into a bridge.

Link faults need a link of each rank's own to break: on one host every rank shares the
loopback, and a firewall rule there hits everyone. So each host (a rank, or a group of
ranks standing for a host) gets a network namespace with ``eth0`` on a veth into a Linux
bridge that lives in a hub namespace; one more veth joins the root namespace to the bridge
so that the harness (which stays in the root namespace) reaches every host, e.g. the c10d
store living in one of them.

Addresses come from 198.18.0.0/15 (RFC 2544, reserved for benchmarking), one /24 per
topology, so that nothing ever talks to a real network. Every name starts with ``ftb``
and contains the topology's tag; that is how :func:`injectors.link.teardown.cleanup_all`
finds the leftovers of a killed run. The undo record is written *before* anything is created, so that a harness
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
import hashlib
import ipaddress
import os
import re
import socket
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from injectors import undo
from injectors.link import nfqueue
from injectors.link.system import (
    NETNS_DIR,
    PREFIX,
    CommandError,
    Unavailable,
    available,
    namespaces,
    run_id,
    sh,
)
from injectors.link.teardown import cleanup_all

BENCH_NET = ipaddress.IPv4Network("198.18.0.0/15")
_LOCK = Path("/run/ftbench-netns.lock")
_CLONE_NEWNET = 0x40000000
_SIOCETHTOOL, _ETHTOOL_STSO = 0x8946, 0x1F
_TAG = re.compile(r"^[a-z0-9]{1,6}$")
T = TypeVar("T")


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
                tag=tag,
                hub=f"{PREFIX}-{tag}-hub",
                bridge=f"{PREFIX}{tag}br",
                subnet=str(subnet),
                hosts=tuple(
                    Host(f"h{i}", f"{PREFIX}-{tag}-h{i}", str(net[i]), "eth0", f"{PREFIX}{tag}h{i}")
                    for i in range(hosts)
                ),
                root_address=str(net[-1]),
                root_ifname=f"{PREFIX}{tag}r",
                wire_packets=wire_packets,
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
            sh(["ip", "-n", hub, "link", "add", h.port, "type", "veth", "peer", "name", h.ifname, "netns", h.namespace])
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
        return [
            _teardown_command(self.tag),
            ["ip", "link", "del", self.root_ifname],
            *(["ip", "netns", "del", h.namespace] for h in self.hosts),
            ["ip", "netns", "del", self.hub],
        ]

    # -- where a trial's processes live (see bench.jobs.job.TrialContext) -----------
    def namespace_for(self, host: int) -> str:
        return self.hosts[host].namespace

    @property
    def store_namespace(self) -> str:
        """The launcher's store stays in the root namespace, reached over the bridge."""
        return ""

    @property
    def store_address(self) -> str:
        return self.root_address

    @property
    def ifname(self) -> str:
        return "eth0"

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


@dataclass(slots=True)
class PrivateNet:
    """One network namespace for a whole trial, with a loopback and nothing else.

    For stacks whose servers cannot be told where to bind (torchft's Manager and HTTP
    healing server, torchrun's stores): everything of the trial runs inside, so nothing
    outside the trial can reach what listens there. The host's own addresses are added
    to the namespace's loopback, so that servers advertising the host name (as torchft's
    do) are reached as they would be outside, without a change to the stack.
    """

    tag: str
    namespace: str
    _record: Path | None = field(default=None, repr=False)

    @classmethod
    def create(cls, tag: str) -> PrivateNet:
        if not _TAG.match(tag):
            raise ValueError(f"network tag {tag!r}: expected 1-6 characters of [a-z0-9] (see tag_for)")
        reason = available()
        if reason:
            raise Unavailable(reason)
        net = cls(tag=tag, namespace=f"{PREFIX}-{tag}-p")
        with _locked():
            if net.namespace in namespaces():
                raise RuntimeError(f"a private network tagged {tag!r} already exists (ip netns list)")
            net._record = undo.register(
                run_id(), f"private network {tag}", [_teardown_command(tag), ["ip", "netns", "del", net.namespace]]
            )
            try:
                sh(["ip", "netns", "add", net.namespace])
                sh(["ip", "-n", net.namespace, "link", "set", "lo", "up"])
                for address in _own_addresses():
                    sh(["ip", "-n", net.namespace, "addr", "add", address, "dev", "lo"])
            except BaseException:
                net.destroy()
                raise
        return net

    def namespace_for(self, host: int) -> str:
        return self.namespace

    @property
    def store_namespace(self) -> str:
        return self.namespace

    @property
    def store_address(self) -> str:
        return "127.0.0.1"

    @property
    def ifname(self) -> str:
        return "lo"

    def destroy(self) -> list[str]:
        """Kill what is still inside, delete the namespace (idempotent)."""
        removed = cleanup_all(tag=self.tag)
        if self._record is not None:
            undo.forget(self._record)
            self._record = None
        return removed


def _own_addresses() -> list[str]:
    """The addresses the host name resolves to, other than loopback, as ``ADDR/32``."""
    found = set()
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, proto=socket.IPPROTO_TCP)
    except OSError:
        return []
    for family, *_rest, sockaddr in infos:
        address = ipaddress.ip_address(sockaddr[0])
        if not address.is_loopback:
            found.add(f"{address}/{32 if family == socket.AF_INET else 128}")
    return sorted(found)


def _teardown_command(tag: str) -> list[str]:
    """The full sweep of a tag's namespaces, run by another process (an undo record)."""
    return ["env", f"PYTHONPATH={nfqueue.PACKAGE_ROOT}", sys.executable, "-m", "injectors.link.teardown", tag]


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
    value: T = box["value"]
    return value


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
