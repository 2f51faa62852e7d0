"""``ftbench cleanup``: remove what runs that died without cleaning up left behind.

A run's guard normally does this when its harness dies; this is for the cases where
the guard could not (the machine rebooted mid-run, the guard was killed too). Runs that
are still going (their harness is alive) are left alone, so it is safe to call while
another benchmark runs.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from bench.procs.hygiene import alive, kill_all, marked
from injectors import undo


def active_runs() -> set[str]:
    """Run ids whose harness is alive, read from their guards' command lines."""
    active = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"bench.procs.guard" in argv:
            i = argv.index(b"bench.procs.guard")
            if len(argv) > i + 2 and argv[i + 2].isdigit() and alive(int(argv[i + 2])):
                active.add(argv[i + 1].decode())
    return active


def cleanup() -> list[str]:
    """Kill leftover processes, run leftover undo records, delete leftover namespaces."""
    active = active_runs()
    removed: list[str] = []
    orphans: dict[str, list[int]] = defaultdict(list)
    for pid, run in marked().items():
        if run not in active and alive(pid):
            orphans[run].append(pid)
    for run, pids in sorted(orphans.items()):
        survivors = kill_all(pids)
        removed.append(f"{len(pids) - len(survivors)} process(es) of run {run}")
    for record in undo.pending():
        if record.parent.name not in active:
            removed += undo.undo_all(record.parent.name)
    removed += _namespaces(active)
    return removed


def _namespaces(active: set[str]) -> list[str]:
    from injectors.link import netns, system, teardown

    if system.available() is not None:
        return []
    keep = {netns.tag_for(run) for run in active}
    tags = {m.group(1) for n in system.namespaces() if (m := re.fullmatch(rf"{system.PREFIX}-([a-z0-9]+)-.*", n))}
    removed = []
    for tag in sorted(tags - keep):
        removed += teardown.cleanup_all(tag)
    return removed
