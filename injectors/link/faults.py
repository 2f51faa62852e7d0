"""Link faults on a host's namespace: partition, link down, TCP reset, loss, rate, delay, corruption.

Each fault acts on the victim hosts' namespaces for ``duration_s`` (the shared
mechanics are :class:`injectors.link.base.LinkFault`). The scenario names the fault;
the mechanism that serves it depends on the kernel and is returned by :meth:`inject`
(``"mechanism"``) so that the run records it:

=========== ====================================== ===================================
fault       with netem (most Linux hosts)           without netem (e.g. this suite's VMs)
=========== ====================================== ===================================
partition   iptables DROP in and out of eth0        same
link_down   ``ip link set eth0 down``               same
tcp_reset   iptables REJECT --reject-with tcp-reset same
            on the victim's input
loss        netem loss on the victim's bridge port  iptables ``statistic`` random DROP on
                                                    the victim's input
rate_limit  tbf on eth0 and on the bridge port      same
delay       netem delay/jitter on the bridge port   userspace NFQUEUE stage on the input
corrupt     NFQUEUE stage with the TCP checksum     same; ``fix_checksum=False`` gives
            recomputed (silent corruption)          netem corrupt where present
=========== ====================================== ===================================

Direction: loss, delay and corruption hit traffic *arriving at* the victim with either
mechanism (netem sits on the bridge port that feeds the victim's eth0; the iptables and
NFQUEUE forms on its INPUT), so the two mechanisms are interchangeable. Dropping on the
victim's own OUTPUT would not be loss: the local TCP learns of it at once.

Packets: netem and iptables see what the veth carries. In a default topology that is a
TSO super-packet of up to 64 KiB, so ``loss`` drops bursts (as netem does on a TSO host);
in a ``Topology(wire_packets=True)`` every packet is MTU-sized and ``percent`` means wire
packets (measured: 10 % asked, 6-14 % of arriving packets dropped). The NFQUEUE stage
always sees MTU-sized packets: the kernel segments before queueing.

Corruption: netem ``corrupt`` flips a bit *after* the checksum is final, so the
receiving TCP discards the segment and retransmits: it behaves as loss (docs/facts.md). The
advertised fault is payload bytes that change while TCP accepts them, so ``Corrupt``
uses the NFQUEUE stage with the checksum recomputed unless ``fix_checksum=False``.
"""

from __future__ import annotations

from typing import Any

from injectors.link import netns
from injectors.link.base import IFNAME, LinkFault, netem_available


class Partition(LinkFault):
    """Blackhole: every packet into and out of the victim's eth0 is dropped, silently."""

    kind = "partition"

    def mechanism(self) -> str:
        return "iptables-drop"

    def _apply(self, ns: str) -> None:
        self._rule(ns, "INPUT", ["-i", IFNAME], ["DROP"])
        self._rule(ns, "OUTPUT", ["-o", IFNAME], ["DROP"])


class LinkDown(LinkFault):
    """The victim's eth0 goes down (carrier lost on both ends); back up on undo."""

    kind = "link_down"

    def mechanism(self) -> str:
        return "ip-link-down"

    def _apply(self, ns: str) -> None:
        self._change(
            f"{IFNAME} down in {ns}",
            do=["ip", "-n", ns, "link", "set", IFNAME, "down"],
            undo=[["ip", "-n", ns, "link", "set", IFNAME, "up"]],
        )


class TcpReset(LinkFault):
    """Every TCP segment reaching the victim is answered with a RST: its peers see
    ECONNRESET within milliseconds, the victim itself only a silent peer."""

    kind = "tcp_reset"

    def mechanism(self) -> str:
        return "iptables-reject-tcp-reset"

    def direction(self) -> str:
        return "ingress"

    def _apply(self, ns: str) -> None:
        self._rule(ns, "INPUT", ["-i", IFNAME, "-p", "tcp"], ["REJECT", "--reject-with", "tcp-reset"])


class Loss(LinkFault):
    """Random loss of ``percent`` % of the packets arriving at the victim."""

    kind = "loss"

    def __init__(self, *, percent: float, duration_s: float, mechanism: str = "auto") -> None:
        super().__init__(duration_s=duration_s)
        self.percent = percent
        if mechanism not in ("auto", "netem", "iptables"):
            raise ValueError(f"loss: mechanism must be auto, netem or iptables, got {mechanism!r}")
        self._wanted = mechanism

    def params(self) -> dict[str, Any]:
        return {"percent": self.percent}

    def direction(self) -> str:
        return "ingress"

    def mechanism(self) -> str:
        use_netem = self._wanted == "netem" or (self._wanted == "auto" and netem_available())
        return "netem-loss" if use_netem else "iptables-statistic-drop"

    def _why_not(self) -> str | None:
        if self._wanted == "netem" and not netem_available():
            return "netem is not available in this kernel (tc: Specified qdisc kind is unknown)"
        return None

    def _apply(self, ns: str) -> None:
        if self.mechanism() == "netem-loss":
            hub, port = netns.locate(ns)
            self._qdisc(hub, port, "netem", "loss", f"{self.percent}%", "limit", "10000")
        else:
            self._rule(
                ns,
                "INPUT",
                ["-i", IFNAME, "-m", "statistic", "--mode", "random", "--probability", f"{self.percent / 100:.6f}"],
                ["DROP"],
            )


class RateLimit(LinkFault):
    """Bandwidth cap of ``rate_mbit`` in each direction (tbf on eth0 and on the bridge port)."""

    kind = "rate_limit"

    def __init__(
        self, *, rate_mbit: float, duration_s: float, burst_kb: float | None = None, latency_ms: float = 50.0
    ) -> None:
        super().__init__(duration_s=duration_s)
        self.rate_mbit = rate_mbit
        # tbf needs a bucket of at least one packet; 5 ms worth keeps the cap tight.
        self.burst_kb = burst_kb if burst_kb is not None else max(16.0, rate_mbit * 1e6 / 8 * 0.005 / 1024)
        self.latency_ms = latency_ms

    def params(self) -> dict[str, Any]:
        return {"rate_mbit": self.rate_mbit, "burst_kb": round(self.burst_kb, 1), "latency_ms": self.latency_ms}

    def mechanism(self) -> str:
        return "tbf"

    def _apply(self, ns: str) -> None:
        spec = (
            "tbf",
            "rate",
            f"{self.rate_mbit}mbit",
            "burst",
            f"{int(self.burst_kb * 1024)}",
            "latency",
            f"{self.latency_ms}ms",
        )
        hub, port = netns.locate(ns)
        self._qdisc(ns, IFNAME, *spec)
        self._qdisc(hub, port, *spec)


class Delay(LinkFault):
    """Packets arriving at the victim are held ``delay_ms`` +/- ``jitter_ms`` (uniform, so
    they may be reordered, as with netem)."""

    kind = "delay"

    def __init__(
        self, *, delay_ms: float, duration_s: float, jitter_ms: float = 0.0, mechanism: str = "auto", seed: int = 0
    ) -> None:
        super().__init__(duration_s=duration_s)
        if mechanism not in ("auto", "netem", "nfqueue"):
            raise ValueError(f"delay: mechanism must be auto, netem or nfqueue, got {mechanism!r}")
        self.delay_ms, self.jitter_ms, self.seed, self._wanted = delay_ms, jitter_ms, seed, mechanism

    def params(self) -> dict[str, Any]:
        return {"delay_ms": self.delay_ms, "jitter_ms": self.jitter_ms}

    def direction(self) -> str:
        return "ingress"

    def mechanism(self) -> str:
        use_netem = self._wanted == "netem" or (self._wanted == "auto" and netem_available())
        return "netem-delay" if use_netem else "nfqueue-delay"

    def _why_not(self) -> str | None:
        if self._wanted == "netem" and not netem_available():
            return "netem is not available in this kernel (tc: Specified qdisc kind is unknown)"
        return self._stage_why_not() if self.mechanism() == "nfqueue-delay" else None

    def _apply(self, ns: str) -> None:
        if self.mechanism() == "netem-delay":
            hub, port = netns.locate(ns)
            jitter = [f"{self.jitter_ms}ms"] if self.jitter_ms else []
            self._qdisc(hub, port, "netem", "delay", f"{self.delay_ms}ms", *jitter, "limit", "10000")
        else:
            self._stage(ns, delay_ms=self.delay_ms, jitter_ms=self.jitter_ms, seed=self.seed)


class Corrupt(LinkFault):
    """One bit flipped in the TCP payload of ``percent`` % of the TCP data packets arriving
    at the victim (packets without payload, pure ACKs, pass unchanged). With
    ``fix_checksum`` (the default) TCP accepts the wrong bytes: silent data corruption.
    Without it the segment is discarded by the receiver: loss in disguise."""

    kind = "corrupt"

    def __init__(
        self, *, percent: float, duration_s: float, fix_checksum: bool = True, mechanism: str = "auto", seed: int = 0
    ) -> None:
        super().__init__(duration_s=duration_s)
        self.percent = percent
        if mechanism not in ("auto", "netem", "nfqueue"):
            raise ValueError(f"corrupt: mechanism must be auto, netem or nfqueue, got {mechanism!r}")
        self.fix_checksum, self.seed, self._wanted = fix_checksum, seed, mechanism

    def params(self) -> dict[str, Any]:
        return {"percent": self.percent, "fix_checksum": self.fix_checksum}

    def direction(self) -> str:
        return "ingress"

    def mechanism(self) -> str:
        if self.fix_checksum:
            return "nfqueue-corrupt"
        use_netem = self._wanted == "netem" or (self._wanted == "auto" and netem_available())
        return "netem-corrupt" if use_netem else "nfqueue-corrupt-badsum"

    def _why_not(self) -> str | None:
        if self._wanted == "netem" and self.fix_checksum:
            return (
                "netem cannot recompute the TCP checksum (its corruption is dropped by the receiver, "
                "i.e. behaves as loss); use fix_checksum=False for that, or the NFQUEUE stage"
            )
        if self._wanted == "netem" and not netem_available():
            return "netem is not available in this kernel (tc: Specified qdisc kind is unknown)"
        return self._stage_why_not() if self.mechanism().startswith("nfqueue") else None

    def _apply(self, ns: str) -> None:
        if self.mechanism() == "netem-corrupt":
            hub, port = netns.locate(ns)
            self._qdisc(hub, port, "netem", "corrupt", f"{self.percent}%", "limit", "10000")
        else:
            self._stage(ns, corrupt=self.percent / 100, fix_checksum=self.fix_checksum, seed=self.seed)
