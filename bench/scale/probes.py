"""Costs the model of a protocol needs that no operation's readings separate: measured
once per scale run, apart from any operation, in a process of the run's forkserver
(torch's own classes imported), and recorded in ``scale.json``.

- ``rendezvous_state``: torchrun's rendezvous state (``_RendezvousState`` with k agents,
  as its backend stores it: pickled, then base64) in bytes per agent, and the CPU seconds
  per agent of writing it (pickle, base64) and reading it back: what every
  compare-and-set attempt of the race costs an agent. Thread CPU time
  (``CLOCK_THREAD_CPUTIME_ID``), so other work on the machine does not inflate it; the
  slope over k, so a fixed cost per call does not either. And what every attempt costs
  whatever k: the executor records an event twice an attempt (after the sync, and on
  adding itself), and each record first names its caller with torch's
  ``get_method_name()``, which walks ``inspect.stack()`` twice (before it checks whether
  anything listens): timed at the depth of an agent's call (:data:`AGENT_DEPTH` frames), in a
  thread, as a participant calls it (:func:`_record_cost` says why that matters).
- ``interpreter_lock``: the CPU a blocking call costs a thread that shares its process's
  interpreter lock with T - 1 others all doing the same (``time.sleep(0)``: the lock
  released for a system call and taken back), for T from 1 to 2,048: on one machine
  ``ftbench scale`` packs up to 2,048 participants into a process, and every request a
  participant sends is such a call. Process CPU time (``getrusage``) over T x R calls.
"""

from __future__ import annotations

import base64
import datetime
import pickle
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from bench.procs.hygiene import set_pdeathsig

SIZES = (16, 128, 1024)
REPEATS = 5
AGENT_DEPTH = 10
"""Frames under an agent's event record: the thread's start, the participant, the
handler's next_rendezvous, the executor's run and its action, the record."""
RECORDS_PER_ATTEMPT = 2


def _record_cost() -> float:
    """Timed in a thread of its own, as a participant calls it: ``inspect.stack()`` looks
    each frame's module up by its file, and a frame with no source file (the main thread
    of a forkserver's child, or of ``python -m``, starts in one) sends the lookup through
    every loaded module on every call. Here that made the main thread's call 16 ms
    against 1.8 ms in a thread; a torchrun agent started by its console script has a
    file under every frame, as a thread does."""
    import threading

    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import get_method_name

    def nest(depth: int) -> float:
        if depth > 0:
            return nest(depth - 1)
        best = float("inf")
        for _ in range(REPEATS):
            t0 = time.thread_time()
            get_method_name()  # type: ignore[no-untyped-call]  # torch's own, untyped
            best = min(best, time.thread_time() - t0)
        return best

    out: list[float] = []
    thread = threading.Thread(target=lambda: out.append(nest(AGENT_DEPTH)), daemon=True)
    thread.start()
    thread.join(60)
    return out[0] if out else float("nan")


def rendezvous_state() -> dict[str, Any]:
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

    ks, sizes, seconds = [], [], []
    for k in SIZES:
        state = _RendezvousState()
        now = datetime.datetime.now()
        for i in range(k):
            node = _NodeDesc(f"host{i}.cluster.example", 40000 + i, 0)
            state.participants[node] = i
            state.last_heartbeats[node] = now
        best = float("inf")
        for _ in range(REPEATS):
            t0 = time.thread_time()
            text = base64.b64encode(pickle.dumps(state))
            pickle.loads(base64.b64decode(text))
            best = min(best, time.thread_time() - t0)
        ks.append(k)
        sizes.append(len(text))
        seconds.append(best)
    per_entry_bytes = float(np.polyfit(ks, sizes, 1)[0])
    per_entry_s = float(np.polyfit(ks, seconds, 1)[0])
    return {
        "what": "torch _RendezvousState with k agents: pickle + base64 written, decoded + unpickled read",
        "k": ks,
        "bytes": sizes,
        "cpu_s": seconds,
        "bytes_per_entry": per_entry_bytes,
        "cpu_s_per_entry": max(per_entry_s, 0.0),
        "cpu_s_per_attempt": RECORDS_PER_ATTEMPT * _record_cost(),
        "clock": "CLOCK_THREAD_CPUTIME_ID, the best of 5",
    }


LOCK_THREADS = (1, 4, 16, 64, 256, 1024, 2048)
LOCK_CALLS = 20_000
"""Calls per thread count (spread over its threads): about a second each here."""


def interpreter_lock() -> dict[str, Any]:
    import resource
    import threading

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    per_call = []
    threading.stack_size(512 * 1024)
    for t in LOCK_THREADS:
        calls = max(1, LOCK_CALLS // t)
        go = threading.Event()

        def work(calls: int = calls, go: threading.Event = go) -> None:
            go.wait()
            for _ in range(calls):
                time.sleep(0)

        threads = [threading.Thread(target=work, daemon=True) for _ in range(t)]
        for th in threads:
            th.start()
        c0 = cpu()
        go.set()
        for th in threads:
            th.join(60)
        per_call.append((cpu() - c0) / (t * calls))
    return {
        "what": "CPU a blocking call (time.sleep(0)) costs each of T threads of one process doing the same",
        "threads": list(LOCK_THREADS),
        "cpu_s_per_call": per_call,
        "clock": "getrusage(RUSAGE_SELF), 20,000 calls a thread count",
    }


PROBES = {"rendezvous_state": rendezvous_state, "interpreter_lock": interpreter_lock}


def main(conn: Connection, name: str) -> None:
    """A process of the run's forkserver: one probe, its result down the pipe."""
    set_pdeathsig()
    try:
        conn.send(("ok", PROBES[name]()))
    except Exception as err:  # reported to the driver, which records it instead of the probe
        conn.send(("error", f"{type(err).__name__}: {err}"))
