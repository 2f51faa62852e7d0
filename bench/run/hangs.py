"""A hang's evidence: the stack's tolerance, and the hung ranks' Python stacks.

When a stack declares a hang (a detection while a fault of the ``hang`` family holds its
victims), the most useful thing a reader can have is where the hung ranks were: the
harness runs ``py-spy dump`` on each victim while it is still stopped or hung, with a
deadline, and files the output beside the trial's event logs
(``events/<point>/<trial>/stack-rank<r>-<pid>.txt``), recording a ``stack_dump`` event
(ok, or why not). Without a detection it dumps when the fault has lasted the stack's
tolerance (its smallest detection timeout): the moment it should have been declared.

py-spy's default mode pauses the target with ptrace, which fails on a SIGSTOPped
process ("Failed to get stack traces"); ``--nonblocking`` reads its memory without
pausing it and works on a stopped rank, on one asleep in a hook, and on one holding the
GIL (measured; docs/facts.md). It needs ptrace rights (root here); where py-spy is
missing or fails, the event says why and the trial goes on.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.procs.events import Event, EventWriter
from bench.scenario.faults import FAULTS
from bench.scenario.model import Scenario
from bench.scenario.strategy import STRATEGIES

DUMP_TIMEOUT_S = 10.0
"""Deadline of one ``py-spy dump`` (it takes ~0.1-0.5 s on a rank; more on loaded cores)."""


def tolerance(scenario: Scenario) -> tuple[float, str]:
    """The stack's smallest detection timeout in seconds, and the config key it comes from."""
    best: tuple[float, str] | None = None
    for key in STRATEGIES[scenario.recovery.strategy].timeouts:
        section, _, rest = key.partition(".")
        if section == "workload":
            value = getattr(scenario.workload, rest)
        elif section == "recovery":
            strategy, _, knob = rest.partition(".")
            if strategy != scenario.recovery.strategy:
                continue
            value = getattr(scenario.recovery.params, knob)
        else:
            raise ValueError(f"timeout key {key!r}: expected workload.X or recovery.<strategy>.X")
        seconds = float(value) / 1000 if key.endswith("_ms") else float(value)
        if best is None or seconds < best[0]:
            best = (seconds, key)
    return best if best is not None else (float("nan"), "")


def py_spy() -> str | None:
    """The py-spy beside this interpreter (the venv's), else on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


@dataclass
class _Held:
    fault: int
    t0: int
    ranks: list[int]
    pids: list[int]
    dumped: bool = False


@dataclass
class StackDumps:
    """Watches a trial's events and dumps the stacks of ranks a hang fault holds."""

    events_dir: Path
    harness: EventWriter
    hang_faults: frozenset[int]
    """Indices of the scenario's faults of the ``hang`` family."""
    tolerance_s: float
    held: dict[int, _Held] = field(default_factory=dict)
    ended: set[int] = field(default_factory=set)
    threads: list[threading.Thread] = field(default_factory=list)

    @classmethod
    def for_scenario(cls, scenario: Scenario, events_dir: Path, harness: EventWriter) -> StackDumps:
        hangs = frozenset(i for i, f in enumerate(scenario.faults) if FAULTS[f.kind].family == "hang")
        return cls(events_dir=events_dir, harness=harness, hang_faults=hangs, tolerance_s=tolerance(scenario)[0])

    def watching(self) -> bool:
        """Whether a hang fault may still need a dump (the driver then follows events)."""
        return bool(self.hang_faults - self.ended)

    def feed(self, e: Event) -> None:
        kind, fault = e["event"], int(e.get("fault", -1))
        if kind == "inject" and fault in self.hang_faults and fault not in self.held:
            pids = [int(p) for p in e.get("pids", [])] or ([int(e["pid"])] if e.get("src") == "rank" else [])
            ranks = [int(r) for r in e.get("ranks", [])]
            self.held[fault] = _Held(fault=fault, t0=int(e["t"]), ranks=ranks, pids=pids)
        elif kind == "fault_end" and fault in self.hang_faults:
            self.ended.add(fault)
            self.held.pop(fault, None)
        elif kind == "detect":
            for held in self.held.values():
                if not (e.get("src") == "rank" and int(e.get("rank", -1)) in held.ranks):
                    self._dump(held, f"detect ({e.get('how', '')} by {e.get('src', '')})")

    def tick(self, now: int) -> None:
        """No detection yet: dump once the fault has lasted the stack's tolerance."""
        for held in self.held.values():
            if not held.dumped and self.tolerance_s == self.tolerance_s and now - held.t0 >= self.tolerance_s * 1e9:
                self._dump(held, f"the fault outlasted the {self.tolerance_s:g} s timeout")

    def _dump(self, held: _Held, trigger: str) -> None:
        if held.dumped:
            return
        held.dumped = True
        ranks = held.ranks if len(held.ranks) == len(held.pids) else [-1] * len(held.pids)
        for rank, pid in zip(ranks, held.pids, strict=True):
            thread = threading.Thread(
                target=self._one, args=(held.fault, rank, pid, trigger), name=f"ftbench-pyspy-{pid}", daemon=True
            )
            thread.start()
            self.threads.append(thread)

    def _one(self, fault: int, rank: int, pid: int, trigger: str) -> None:
        name = f"stack-rank{rank}-{pid}.txt" if rank >= 0 else f"stack-{pid}.txt"
        exe = py_spy()
        common: dict[str, Any] = {"fault": fault, "of_rank": rank, "of_pid": pid, "trigger": trigger}
        if exe is None:
            self.harness.emit("stack_dump", ok=False, error="py-spy not found", **common)
            return
        start = time.monotonic_ns()
        try:
            out = subprocess.run(
                [exe, "dump", "--pid", str(pid), "--nonblocking"],
                capture_output=True,
                text=True,
                timeout=DUMP_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            self.harness.emit("stack_dump", t=start, ok=False, error=f"{type(err).__name__}: {err}"[:300], **common)
            return
        ok = out.returncode == 0 and "Thread" in out.stdout
        (self.events_dir / name).write_text(
            f"# py-spy dump --pid {pid} --nonblocking ({trigger})\n{out.stdout}{out.stderr}"
        )
        error = "" if ok else (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[0][:300]
        self.harness.emit(
            "stack_dump", t=start, ok=ok, file=name, error=error, dump_s=(time.monotonic_ns() - start) / 1e9, **common
        )

    def close(self) -> None:
        """Wait for dumps under way (each has its own deadline) before the trial's logs close."""
        for thread in self.threads:
            thread.join(timeout=DUMP_TIMEOUT_S + 1)
