"""Link faults on a host's namespace: partition, link down, TCP reset, loss, rate, delay, corruption.

Each fault acts on the victim hosts' namespaces (``target.namespaces``, made by
:class:`injectors.netns.Topology`) for ``duration_s``; the harness calls :meth:`undo`
then. The scenario names the fault; the mechanism that serves it depends on the kernel
and is returned by :meth:`inject` (``"mechanism"``) so that the run records it:

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
receiving TCP discards the segment and retransmits: it behaves as loss (FACTS.md). The
advertised fault is payload bytes that change while TCP accepts them, so ``Corrupt``
uses the NFQUEUE stage with the checksum recomputed unless ``fix_checksum=False``.

Every change is filed with :mod:`injectors.cleanup` before it is made and forgotten after
it is undone. Rules carry the comment ``ftb-<kind>``.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from injectors import cleanup, netns, nfqueue
from injectors.base import Target
from injectors.netns import CommandError, Unavailable, sh

__all__ = ["KINDS", "CommandError", "Corrupt", "Delay", "LinkDown", "LinkFault", "Loss", "Partition",
           "RateLimit", "Target", "TcpReset", "Unavailable", "netem_available"]
IFNAME = "eth0"


@functools.cache
def netem_available() -> bool:
    """True if ``tc qdisc add ... netem`` works here (tried on lo of a throwaway namespace)."""
    if netns.available():
        return False
    probe = f"{netns.PREFIX}-netem-{os.getpid()}"
    if sh(["ip", "netns", "add", probe], check=False).returncode != 0:
        return False
    try:
        sh(["ip", "-n", probe, "link", "set", "lo", "up"], check=False)
        return sh(["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                  check=False).returncode == 0
    finally:
        sh(["ip", "netns", "del", probe], check=False)


def _ipt(ns: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", ns, "iptables", "-w", "5", *args]


class LinkFault:
    """Shared bookkeeping: undo records, per-namespace application, idempotent undo."""

    kind: ClassVar[str] = "link"

    def __init__(self, *, duration_s: float) -> None:
        if duration_s < 0:
            raise ValueError(f"{self.kind}: duration_s must be >= 0, got {duration_s}")
        self.duration_s = duration_s
        self.report: dict[str, Any] = {}
        """Filled by undo(): per namespace, what the mechanism measured (NFQUEUE stage
        statistics, packets matched by the fault's firewall rules)."""
        self._namespaces: list[str] = []
        self._steps: list[tuple[Path, list[list[str]], Callable[[], None] | None]] = []

    # -- what a subclass says -------------------------------------------------------
    def params(self) -> dict[str, Any]:
        return {}

    def mechanism(self) -> str:
        raise NotImplementedError

    def direction(self) -> str:
        return "both"

    def _why_not(self) -> str | None:
        """Mechanism-specific reason this fault cannot be had here (after the netns check)."""
        return None

    def _apply(self, ns: str) -> None:
        raise NotImplementedError

    # -- the injector protocol ------------------------------------------------------
    def unavailable(self) -> str | None:
        """None if :meth:`inject` can work here; else the reason to skip the scenario."""
        return netns.available() or self._why_not()

    def inject(self, target: Target) -> dict[str, Any]:
        reason = self.unavailable()
        if reason:
            raise Unavailable(f"{self.kind}: {reason}")
        if not target.namespaces:
            raise ValueError(f"{self.kind}: the target has no network namespaces (the trial must run its "
                             "ranks in an injectors.netns.Topology)")
        if self._steps:
            raise RuntimeError(f"{self.kind}: inject() again before undo()")
        self.report = {}
        self._namespaces = list(target.namespaces)
        try:
            for ns in target.namespaces:
                self._apply(ns)
        except BaseException as exc:
            try:
                self.undo()
            except RuntimeError as undo_exc:  # keep the cause in front; the records stay for cleanup
                exc.add_note(str(undo_exc))
            raise
        details = {"fault": self.kind, "mechanism": self.mechanism(), "direction": self.direction(),
                   **self.params(), "duration_s": self.duration_s, "namespaces": list(target.namespaces)}
        if self.report:  # the NFQUEUE stage: its pids now, its statistics in .report after undo()
            details["stage"] = {ns: dict(r) for ns, r in self.report.items()}
        return details

    def undo(self) -> None:
        """Revert every change, newest first; idempotent. Raises if a revert failed (its
        record is kept for ``ftbench cleanup``), except where the namespace is gone.

        Before the rules go, their packet counters are read into :attr:`report`
        (``matched_packets`` per namespace): the proof that a loss or a partition
        really dropped traffic, even when nobody noticed."""
        if self._steps:
            self._count_matches()
        failed = []
        while self._steps:
            path, commands, hook = self._steps.pop()
            if hook is not None:
                hook()
                cleanup.forget(path)
                continue
            errors = []
            for argv in commands:
                if _gone(argv):
                    continue
                done = sh(argv, check=False)
                if done.returncode != 0 and not _gone(argv):
                    errors.append(f"`{' '.join(argv)}`: {done.stderr.strip()}")
            if errors:
                failed += errors
            else:
                cleanup.forget(path)
        if failed:
            raise RuntimeError(f"{self.kind}: undo failed: {'; '.join(failed)}")

    def _count_matches(self) -> None:
        tag = f"{netns.PREFIX}-{self.kind}"
        for ns in getattr(self, "_namespaces", []):
            if _gone(["ip", "netns", "exec", ns]):
                continue
            saved = sh(["ip", "netns", "exec", ns, "iptables-save", "-c"], check=False).stdout
            counts = [int(line[1:line.index(":")]) for line in saved.splitlines()
                      if line.startswith("[") and tag in line]
            if counts:
                self.report.setdefault(ns, {})["matched_packets"] = sum(counts)

    # -- helpers for subclasses -----------------------------------------------------
    def _change(self, what: str, do: list[str] | None, undo: list[list[str]],
                hook: Callable[[], None] | None = None) -> None:
        """File ``undo`` (run by another process if we die), then run the one command ``do``.

        If ``do`` fails nothing was changed, so its record is dropped at once.
        """
        path = cleanup.register(netns.run_id(), f"{self.kind}: {what}", undo)
        self._steps.append((path, undo, hook))
        if do is None:
            return
        try:
            sh(do)
        except BaseException:
            self._steps.pop()
            cleanup.forget(path)
            raise

    def _rule(self, ns: str, chain: str, match: list[str], jump: list[str]) -> None:
        rest = [*match, "-m", "comment", "--comment", f"{netns.PREFIX}-{self.kind}", "-j", *jump]
        self._change(f"iptables {chain} {' '.join(rest)} in {ns}",
                     do=_ipt(ns, "-I", chain, "1", *rest), undo=[_ipt(ns, "-D", chain, *rest)])

    def _qdisc(self, ns: str, dev: str, *spec: str) -> None:
        self._change(f"qdisc {' '.join(spec)} on {dev} in {ns}",
                     do=["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", *spec],
                     undo=[["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"]])

    def _stage(self, ns: str, **knobs: Any) -> None:
        """Start the NFQUEUE daemon in ``ns`` and queue the victim's input to it."""
        proc: list[subprocess.Popen[bytes]] = []

        def stop() -> None:
            if proc:
                self.report[ns] = {**self.report.get(ns, {}), **nfqueue.stop(proc.pop())}

        self._change(f"NFQUEUE daemon in {ns}", do=None,
                     undo=[["env", f"PYTHONPATH={nfqueue.PACKAGE_ROOT}", sys.executable, "-m", "injectors.nfqueue",
                            "stop-namespace", ns]], hook=stop)
        proc.append(nfqueue.start(ns, **knobs))
        self._rule(ns, "INPUT", ["-i", IFNAME], ["NFQUEUE", "--queue-num", str(nfqueue.QUEUE), "--queue-bypass"])
        self.report[ns] = {"daemon_pid": proc[0].pid}

    def _stage_why_not(self) -> str | None:
        return nfqueue.available()


def _gone(argv: list[str]) -> bool:
    """The command targets a namespace that no longer exists (so did what it would revert)."""
    for flag in ("-n", "exec"):
        if flag in argv:
            i = argv.index(flag) + 1
            if i < len(argv) and argv[i].startswith(netns.PREFIX):
                return not (netns.NETNS_DIR / argv[i]).exists()
    return False


def _check_percent(kind: str, percent: float) -> float:
    if not 0 < percent <= 100:
        raise ValueError(f"{kind}: percent must be in (0, 100], got {percent}")
    return percent


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
        self._change(f"{IFNAME} down in {ns}", do=["ip", "-n", ns, "link", "set", IFNAME, "down"],
                     undo=[["ip", "-n", ns, "link", "set", IFNAME, "up"]])


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
        self.percent = _check_percent(self.kind, percent)
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
            self._rule(ns, "INPUT", ["-i", IFNAME, "-m", "statistic", "--mode", "random",
                                     "--probability", f"{self.percent / 100:.6f}"], ["DROP"])


class RateLimit(LinkFault):
    """Bandwidth cap of ``rate_mbit`` in each direction (tbf on eth0 and on the bridge port)."""

    kind = "rate_limit"

    def __init__(self, *, rate_mbit: float, duration_s: float, burst_kb: float | None = None,
                 latency_ms: float = 50.0) -> None:
        super().__init__(duration_s=duration_s)
        if rate_mbit <= 0:
            raise ValueError(f"rate_limit: rate_mbit must be > 0, got {rate_mbit}")
        self.rate_mbit = rate_mbit
        # tbf needs a bucket of at least one packet; 5 ms worth keeps the cap tight.
        self.burst_kb = burst_kb if burst_kb is not None else max(16.0, rate_mbit * 1e6 / 8 * 0.005 / 1024)
        self.latency_ms = latency_ms

    def params(self) -> dict[str, Any]:
        return {"rate_mbit": self.rate_mbit, "burst_kb": round(self.burst_kb, 1), "latency_ms": self.latency_ms}

    def mechanism(self) -> str:
        return "tbf"

    def _apply(self, ns: str) -> None:
        spec = ("tbf", "rate", f"{self.rate_mbit}mbit", "burst", f"{int(self.burst_kb * 1024)}",
                "latency", f"{self.latency_ms}ms")
        hub, port = netns.locate(ns)
        self._qdisc(ns, IFNAME, *spec)
        self._qdisc(hub, port, *spec)


class Delay(LinkFault):
    """Packets arriving at the victim are held ``delay_ms`` +/- ``jitter_ms`` (uniform, so
    they may be reordered, as with netem)."""

    kind = "delay"

    def __init__(self, *, delay_ms: float, duration_s: float, jitter_ms: float = 0.0, mechanism: str = "auto",
                 seed: int = 0) -> None:
        super().__init__(duration_s=duration_s)
        if delay_ms < 0 or jitter_ms < 0:
            raise ValueError(f"delay: delay_ms and jitter_ms must be >= 0, got {delay_ms}, {jitter_ms}")
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

    def __init__(self, *, percent: float, duration_s: float, fix_checksum: bool = True,
                 mechanism: str = "auto", seed: int = 0) -> None:
        super().__init__(duration_s=duration_s)
        self.percent = _check_percent(self.kind, percent)
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
            return ("netem cannot recompute the TCP checksum (its corruption is dropped by the receiver, "
                    "i.e. behaves as loss); use fix_checksum=False for that, or the NFQUEUE stage")
        if self._wanted == "netem" and not netem_available():
            return "netem is not available in this kernel (tc: Specified qdisc kind is unknown)"
        return self._stage_why_not() if self.mechanism().startswith("nfqueue") else None

    def _apply(self, ns: str) -> None:
        if self.mechanism() == "netem-corrupt":
            hub, port = netns.locate(ns)
            self._qdisc(hub, port, "netem", "corrupt", f"{self.percent}%", "limit", "10000")
        else:
            self._stage(ns, corrupt=self.percent / 100, fix_checksum=self.fix_checksum, seed=self.seed)


KINDS: dict[str, type[LinkFault]] = {
    cls.kind: cls for cls in (Partition, LinkDown, TcpReset, Loss, RateLimit, Delay, Corrupt)
}
"""Fault kind (as a scenario names it) -> injector class."""
