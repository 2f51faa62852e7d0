"""How long the kernel takes to close an exiting rank's sockets, and the page lists behind it.

    .venv/bin/python tools/exit_trace.py OUT_DIR -- .venv/bin/ftbench run kill-one-rank \\
        --trials 6 --set recovery.strategy=failstop --set launch.start_method=spawn --out OUT_DIR

(root, tracefs at /sys/kernel/tracing.) A rank that exits closes its sockets only after
the kernel has torn its memory down (some 56,000 pages for a DDP rank here), so its peers
learn of the exit tens of milliseconds after the process called ``exit_group``. How long
that teardown takes depends on the per-CPU page lists: freed pages go to the freeing
CPU's list until it holds its *high* mark, and every page past that is handed back to
the zone under the zone's lock, which is slower. Since Linux 6.7 the high mark tunes
itself (raised by allocation bursts, decayed by an eighth a second), so an exit's
length depends on what the machine allocated in the seconds before it.

The tool runs the command with two tracepoints on (``exit_group`` and TCP state changes,
stamped on CLOCK_MONOTONIC with each event's thread group; ``--drains`` adds one per page
drained to a zone) while a thread samples the Normal zone's per-CPU high marks from
``/proc/zoneinfo`` every 20 ms. Then, for every trial in the run directories under
OUT_DIR, it prints each exiting rank's time from ``exit_group`` to its first FIN (and
the pages it drained meanwhile), and the high marks at the trial's injection.
docs/calibration.md ("Launch modes") has what it showed.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.procs.events import read_events

TRACEFS = Path("/sys/kernel/tracing")
EVENTS = ("syscalls:sys_enter_exit_group", "sock:inet_sock_set_state")
DRAIN = "kmem:mm_page_pcpu_drain"
"""One event per page a CPU's list hands back to its zone (``--drains``: hundreds of
thousands of events a trial, which slows the exits it counts about twofold)."""
LINE = re.compile(r"^\s*.+?-\d+\s+\(\s*(\d+)\)\s+\[\d+\]\s+\S+\s+([\d.]+): (\w+)[:(] ?(.*)$")
PAGESET = re.compile(r"cpu: (\d+)\s+count:\s+\d+\s+high:\s+(\d+)")
SAMPLE_S = 0.02


def normal_zone_highs() -> list[int]:
    """The per-CPU page lists' high marks of node 0's Normal zone, by CPU."""
    zones = Path("/proc/zoneinfo").read_text().split("Node 0, zone")
    normal = next(z for z in zones if z.lstrip().startswith("Normal"))
    return [int(high) for _, high in PAGESET.findall(normal)]


def sample(into: list[tuple[int, list[int]]], stop: threading.Event) -> None:
    while not stop.is_set():
        into.append((time.monotonic_ns(), normal_zone_highs()))
        stop.wait(SAMPLE_S)


def traced(command: list[str], *, drains: bool) -> tuple[str, list[tuple[int, list[int]]]]:
    """Run ``command`` with the tracepoints on; the trace's text and the high marks sampled."""
    # What to put back: the clock in use is the bracketed one of the list.
    clock = re.findall(r"\[(\w+)\]", (TRACEFS / "trace_clock").read_text())[0]
    buffer_kb = (TRACEFS / "buffer_size_kb").read_text().split()[0]
    tgid = (TRACEFS / "options" / "record-tgid").read_text().strip()
    was_on = (TRACEFS / "tracing_on").read_text().strip()
    (TRACEFS / "tracing_on").write_text("0")
    (TRACEFS / "trace_clock").write_text("mono")
    (TRACEFS / "buffer_size_kb").write_text("400000" if drains else "65536")
    (TRACEFS / "options" / "record-tgid").write_text("1")
    (TRACEFS / "trace").write_text("")
    (TRACEFS / "set_event").write_text("\n".join(EVENTS + ((DRAIN,) if drains else ())) + "\n")
    highs: list[tuple[int, list[int]]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(highs, stop), daemon=True)
    try:
        (TRACEFS / "tracing_on").write_text("1")
        sampler.start()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    finally:
        stop.set()
        (TRACEFS / "tracing_on").write_text("0")
        text = (TRACEFS / "trace").read_text()
        (TRACEFS / "set_event").write_text("\n")
        (TRACEFS / "trace_clock").write_text(clock)
        (TRACEFS / "buffer_size_kb").write_text(buffer_kb)
        (TRACEFS / "options" / "record-tgid").write_text(tgid)
        (TRACEFS / "tracing_on").write_text(was_on)
    sampler.join()
    return text, highs


@dataclass(frozen=True, slots=True)
class Exit:
    """One process's exit, as the trace saw it."""

    to_fin_ms: float
    """From its ``exit_group`` to its first socket entering FIN_WAIT1."""
    drained: int
    """Pages its threads handed back to a zone in that interval (0 unless ``--drains``)."""


def exits(text: str) -> dict[int, Exit]:
    """Every thread group that called ``exit_group`` and then closed a TCP connection."""
    started: dict[int, float] = {}
    fins: dict[int, float] = {}
    drained: dict[int, int] = defaultdict(int)
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        tgid, t, name, args = int(m.group(1)), float(m.group(2)), m.group(3), m.group(4)
        if name == "sys_exit_group":
            started.setdefault(tgid, t)
        elif tgid not in started or tgid in fins:
            continue
        elif name == "inet_sock_set_state" and "newstate=TCP_FIN_WAIT1" in args:
            fins[tgid] = t
        elif name == "mm_page_pcpu_drain":
            drained[tgid] += 1
    return {tgid: Exit((fins[tgid] - t) * 1e3, drained[tgid]) for tgid, t in started.items() if tgid in fins}


def report(out: Path, text: str, highs: list[tuple[int, list[int]]]) -> None:
    closing = exits(text)
    by_rank: dict[int, list[float]] = defaultdict(list)
    for trial_dir in sorted(out.glob("**/events/*/*/")):
        events = read_events(trial_dir)
        inject = next((e["t"] for e in events if e["event"] == "inject"), None)
        at_inject = next((h for t, h in reversed(highs) if inject is not None and t <= inject), "-")
        ranks = []
        started = {(e["rank"], e["pid"]) for e in events if e["event"] == "proc_start" and e["src"] == "rank"}
        for rank, pid in sorted(started):
            if pid in closing:
                by_rank[rank].append(closing[pid].to_fin_ms)
                ranks.append(f"rank {rank} {closing[pid].to_fin_ms:5.1f} ({closing[pid].drained} drained)")
        trial = trial_dir.relative_to(out)
        print(f"{trial}  exit_group -> FIN ms: {', '.join(ranks)}  high marks at inject: {at_inject}")
    for rank, ms in sorted(by_rank.items()):
        print(f"rank {rank}: median {statistics.median(ms):.1f} ms over {len(ms)} exits")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="where the command writes its run directories")
    parser.add_argument("--drains", action="store_true", help="also count the pages each exit drains to its zone")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run, traced")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to trace: give it after --")
    if not os.access(TRACEFS / "set_event", os.W_OK):
        parser.error(f"{TRACEFS} is not writable here: tracing needs root and tracefs mounted")
    text, highs = traced(command, drains=args.drains)
    report(args.out, text, highs)


if __name__ == "__main__":
    main()
