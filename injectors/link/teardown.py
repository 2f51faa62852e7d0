"""Removing what link faults left behind, found by name alone (``ftb*``).

The undo records of a run (:mod:`injectors.undo`) revert what they describe; this is the
sweep that needs no record: what a topology's own teardown, an undo record, or an
operator runs (``python -m injectors.link.teardown [TAG]``).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sys
from collections.abc import Callable, Iterable

from injectors.link import nfqueue
from injectors.link.system import PREFIX, namespaces, sh, tag_for
from injectors.undo import live_runs


def cleanup_all(tag: str | None = None, *, live: Iterable[str] = ()) -> list[str]:
    """Remove every leftover of ftbench's network namespaces: of one tag, or of every
    run that is not live, and the probe namespaces of processes that died while probing.

    A run is live while its harness is, by the claim in the state directory
    (:func:`injectors.undo.live_runs`) or by what the caller knows (``live``: run ids).
    The caller's word matters where harnesses keep their claims in different state
    directories (``FTBENCH_STATE_DIR``): from one of them, another's live trials would
    look dead, and their namespaces, with the ranks inside, would be removed.

    Queue daemons and other processes inside the namespaces, the namespaces, root links
    named ftb<tag>*, iptables rules commented ftb* and chains named ftb* in the root
    namespace, nftables tables named ftb*. Qdiscs and rules inside a namespace go with
    it. Returns what was removed.
    """
    if tag is None:
        live_tags = {tag_for(run) for run in live_runs() | set(live)}
        tags = {m[1] for n in namespaces() if (m := _TAGGED.fullmatch(n))} - live_tags
        removed = _dead_probes()
        for t in sorted(tags):
            removed += cleanup_all(t)
        return removed + ([] if live_tags else _clean_root_firewall(lambda _text: True))
    ns_re, link_re = re.compile(rf"{PREFIX}-{tag}-(hub|h\d+|p)"), re.compile(rf"{PREFIX}{tag}(br|h\d+|rp?)")
    ours = [n for n in namespaces() if ns_re.fullmatch(n)]
    removed = [f"queue daemon {pid}" for pid in nfqueue.stop_daemons(namespaces=ours)]
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
    removed += _clean_root_firewall(lambda text: tag in text)
    return removed


_TAGGED = re.compile(rf"{PREFIX}-([a-z0-9]{{1,6}})-(hub|h\d+|p)")
_PROBE = re.compile(rf"{PREFIX}-(probe|netem)-(\d+)")


def _dead_probes() -> list[str]:
    """Probe namespaces (``ftb-probe-<pid>``, ``ftb-netem-<pid>``) whose prober died
    before deleting them; a live prober's are left alone."""
    removed = []
    for ns in namespaces():
        m = _PROBE.fullmatch(ns)
        if m and not os.path.exists(f"/proc/{m[2]}") and sh(["ip", "netns", "del", ns], check=False).returncode == 0:
            removed.append(f"namespace {ns}")
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
            if (
                len(parts) == 3
                and parts[2].startswith(PREFIX)
                and mine(parts[2])
                and sh(["nft", "delete", "table", parts[1], parts[2]], check=False).returncode == 0
            ):
                removed.append(f"nft table {parts[1]} {parts[2]}")
    return removed


def main(argv: list[str]) -> int:
    """``python -m injectors.link.teardown [TAG]``: what an undo record or an operator runs."""
    if len(argv) > 1:
        print("usage: python -m injectors.link.teardown [TAG]")
        return 2
    for item in cleanup_all(tag=argv[0] if argv else None):
        print("removed", item)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
