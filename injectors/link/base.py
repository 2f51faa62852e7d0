"""What every link fault shares: undo records, per-namespace application, idempotent undo.

A link fault acts on the victim hosts' namespaces (``target.namespaces``, made by
:class:`injectors.link.netns.Topology`) for ``duration_s``; the harness calls
:meth:`LinkFault.undo` then. Every change is filed with :mod:`injectors.undo` before it
is made and forgotten after it is undone. Rules carry the comment ``ftb-<kind>``. The
kinds themselves are :mod:`injectors.link.faults`.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from injectors import undo as undo_records
from injectors.base import Target
from injectors.link import nfqueue, system
from injectors.link.system import Unavailable, sh

IFNAME = "eth0"


@functools.cache
def netem_available() -> bool:
    """True if ``tc qdisc add ... netem`` works here (tried on lo of a throwaway namespace)."""
    if system.available():
        return False
    probe = f"{system.PREFIX}-netem-{os.getpid()}"
    if sh(["ip", "netns", "add", probe], check=False).returncode != 0:
        return False
    try:
        sh(["ip", "-n", probe, "link", "set", "lo", "up"], check=False)
        return (
            sh(
                ["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"], check=False
            ).returncode
            == 0
        )
    finally:
        sh(["ip", "netns", "del", probe], check=False)


def _ipt(ns: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", ns, "iptables", "-w", "5", *args]


class LinkFault:
    """Shared bookkeeping: undo records, per-namespace application, idempotent undo."""

    kind: ClassVar[str] = "link"

    def __init__(self, *, duration_s: float) -> None:
        # Knob bounds are the scenario's (bench.scenario.faults.link); injectors trust them.
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
        return system.available() or self._why_not()

    def inject(self, target: Target) -> dict[str, Any]:
        reason = self.unavailable()
        if reason:
            raise Unavailable(f"{self.kind}: {reason}")
        if not target.namespaces:
            raise ValueError(
                f"{self.kind}: the target has no network namespaces (the trial must run its "
                "ranks in an injectors.link.netns.Topology)"
            )
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
        details = {
            "fault": self.kind,
            "mechanism": self.mechanism(),
            "direction": self.direction(),
            **self.params(),
            "duration_s": self.duration_s,
            "namespaces": list(target.namespaces),
        }
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
                undo_records.forget(path)
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
                undo_records.forget(path)
        if failed:
            raise RuntimeError(f"{self.kind}: undo failed: {'; '.join(failed)}")

    def _count_matches(self) -> None:
        tag = f"{system.PREFIX}-{self.kind}"
        for ns in getattr(self, "_namespaces", []):
            if _gone(["ip", "netns", "exec", ns]):
                continue
            saved = sh(["ip", "netns", "exec", ns, "iptables-save", "-c"], check=False).stdout
            counts = [
                int(line[1 : line.index(":")]) for line in saved.splitlines() if line.startswith("[") and tag in line
            ]
            if counts:
                self.report.setdefault(ns, {})["matched_packets"] = sum(counts)

    # -- helpers for subclasses -----------------------------------------------------
    def _change(
        self, what: str, do: list[str] | None, undo: list[list[str]], hook: Callable[[], None] | None = None
    ) -> None:
        """File ``undo`` (run by another process if we die), then run the one command ``do``.

        If ``do`` fails nothing was changed, so its record is dropped at once.
        """
        path = undo_records.register(system.run_id(), f"{self.kind}: {what}", undo)
        self._steps.append((path, undo, hook))
        if do is None:
            return
        try:
            sh(do)
        except BaseException:
            self._steps.pop()
            undo_records.forget(path)
            raise

    def _rule(self, ns: str, chain: str, match: list[str], jump: list[str]) -> None:
        rest = [*match, "-m", "comment", "--comment", f"{system.PREFIX}-{self.kind}", "-j", *jump]
        self._change(
            f"iptables {chain} {' '.join(rest)} in {ns}",
            do=_ipt(ns, "-I", chain, "1", *rest),
            undo=[_ipt(ns, "-D", chain, *rest)],
        )

    def _qdisc(self, ns: str, dev: str, *spec: str) -> None:
        self._change(
            f"qdisc {' '.join(spec)} on {dev} in {ns}",
            do=["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", *spec],
            undo=[["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"]],
        )

    def _stage(self, ns: str, **knobs: Any) -> None:
        """Start the NFQUEUE daemon in ``ns`` and queue the victim's input to it."""
        proc: list[subprocess.Popen[bytes]] = []

        def stop() -> None:
            if proc:
                self.report[ns] = {**self.report.get(ns, {}), **nfqueue.stop(proc.pop())}

        self._change(
            f"NFQUEUE daemon in {ns}",
            do=None,
            undo=[
                [
                    "env",
                    f"PYTHONPATH={nfqueue.PACKAGE_ROOT}",
                    sys.executable,
                    "-m",
                    "injectors.link.nfqueue",
                    "stop-namespace",
                    ns,
                ]
            ],
            hook=stop,
        )
        proc.append(nfqueue.start(ns, **knobs))
        self._rule(ns, "INPUT", ["-i", IFNAME], ["NFQUEUE", "--queue-num", str(nfqueue.QUEUE), "--queue-bypass"])
        self.report[ns] = {"daemon_pid": proc[0].pid}

    def _stage_why_not(self) -> str | None:
        return nfqueue.available()

    def uses_stage(self) -> bool:
        """Whether the userspace NFQUEUE stage serves this fault here (its own cost is
        then measured and reported beside the figures)."""
        return self.mechanism().startswith("nfqueue")


def _gone(argv: list[str]) -> bool:
    """The command targets a namespace that no longer exists (so did what it would revert)."""
    for flag in ("-n", "exec"):
        if flag in argv:
            i = argv.index(flag) + 1
            if i < len(argv) and argv[i].startswith(system.PREFIX):
                return not (system.NETNS_DIR / argv[i]).exists()
    return False
