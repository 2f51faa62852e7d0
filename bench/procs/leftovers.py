"""``ftbench cleanup``: remove what runs that died without cleaning up left behind.

A run's guard normally does this when its harness dies; this is for the cases where
the guard could not (the machine rebooted mid-run, the guard was killed too). Runs that
are still going (their harness is alive) are left alone, so it is safe to call while
another benchmark runs.
"""

from __future__ import annotations

from collections import defaultdict

from bench.procs import guard
from bench.procs.hygiene import alive, kill_all, marked
from injectors import undo


def active_runs() -> set[str]:
    """Run ids whose harness is alive, read from their guards' command lines."""
    return {run for run, harness in guard.running().items() if alive(harness)}


def cleanup() -> list[str]:
    """Kill leftover processes, run leftover undo records, delete leftover namespaces;
    runs whose harness is alive are left alone. What was removed, and what could not be."""
    active = active_runs() | undo.live_runs()
    removed: list[str] = []
    orphans: dict[str, list[int]] = defaultdict(list)
    for pid, run in marked().items():
        if run not in active and alive(pid):
            orphans[run].append(pid)
    for run, pids in sorted(orphans.items()):
        survivors = kill_all(pids)
        removed.append(f"{len(pids) - len(survivors)} process(es) of run {run}")
    if undo.problem():
        removed.append(f"nothing from the undo records: {undo.problem()}")
    for run in sorted({record.parent.name for record in undo.pending()} - active):
        report = undo.undo_all(run)
        removed += report.reverted + [f"nothing: {problem}" for problem in report.problems]
        undo.release(run)
    return removed + _namespaces(active)


def _namespaces(active: set[str]) -> list[str]:
    from injectors.link import system, teardown

    if system.available() is not None:
        return []
    return teardown.cleanup_all(live=active)  # every run that is not live, and dead probes
