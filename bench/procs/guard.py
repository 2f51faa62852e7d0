"""The guard: sweeps a run's processes when the harness dies without cleaning up.

Started by the harness at the beginning of a run, in its own session and without a
parent-death signal, so that it outlives a SIGKILLed harness. It blocks reading its
stdin (a pipe from the harness): end of file means the harness is gone (or finished),
and the guard kills every process carrying the run's marker, undoes what injectors
registered for the run (see :func:`injectors.undo.undo_all`), and exits.

Run as ``python -m bench.procs.guard RUN_ID HARNESS_PID``. It imports neither torch nor the
harness, so it starts in tens of milliseconds.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.procs.hygiene import sweep
from injectors.undo import release, undo_all

MODULE = "bench.procs.guard"


def running() -> dict[str, int]:
    """run id -> harness pid of every guard on this machine, read from the guards'
    command lines (``python -m bench.procs.guard RUN_ID HARNESS_PID``): how a run is
    known to be live, and which run a harness process owns, without its state directory."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if MODULE.encode() in argv:
            i = argv.index(MODULE.encode())
            if len(argv) > i + 2 and argv[i + 2].isdigit():
                found[argv[i + 1].decode()] = int(argv[i + 2])
    return found


def main(argv: list[str]) -> int:
    run_id, harness_pid = argv[0], int(argv[1])
    for _ in sys.stdin.buffer:  # lines are ignored: only the end of the pipe matters
        pass
    sweep(run_id, keep={harness_pid})
    undo_all(run_id)
    release(run_id)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
