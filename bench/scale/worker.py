"""A process of participants, driven over a pipe by :mod:`bench.scale.driver`.

Messages (tuples, the first item names them), each answered once:

- ``setup(context, participant class, ids)``: build the participants and connect them,
  concurrently; answers the errors by id, the seconds it took and the retries;
- ``kill(ids)``: those participants die (:meth:`Participant.kill`);
- ``arm(op, ids)``: one thread per participant, each waiting for the release;
- ``go(release_ns, wait_s)``: at ``release_ns`` (CLOCK_MONOTONIC, the same clock in every
  process of the host) every armed thread runs the operation; answers, per participant,
  the monotonic time it had its result (or the error), this process's CPU seconds
  meanwhile, and how late the release was;
- ``reset``: let go of the participants (the next point builds its own);
- ``close``: let go of everything, answer, exit.

A participant still waiting when ``wait_s`` is up is answered as unfinished; its thread
ends at the operation's own timeout (every client call here is given one). The driver
does not reuse a worker whose threads did not finish.
"""

from __future__ import annotations

import importlib
import os
import resource
import signal
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.procs.hygiene import redirect_output, set_pdeathsig
from bench.scale import system

STACK_BYTES = 512 * 1024
"""Stack of each participant thread (the default 8 MB is address space 16K threads need
not reserve)."""
ENVIRONMENT = {
    "TOKIO_WORKER_THREADS": "1",  # each LighthouseClient builds a tokio runtime of its own
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",  # a shared store would listen on every interface
    "RANK": "1",  # NVRx's store is a client on any rank but 0
    "TORCH_CPP_LOG_LEVEL": "ERROR",
    "RUST_LOG": "error",
}

SETUP_ATTEMPTS = 3
"""Tries to connect a participant (setup is not timed): under load a connection now and
then fails once (torchft's client: "transport error"); the retries are counted."""

Result = tuple[int, int | None, str]
"""(participant id, monotonic ns it had its result or None, error or "")."""


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _error(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".splitlines()[0][:300]


class Worker:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.participants: dict[int, Any] = {}
        self.armed: list[threading.Thread] = []
        self.armed_ids: list[int] = []
        self.release = threading.Event()
        self.results: dict[int, tuple[int | None, str]] = {}
        self.op = ""
        self.retries = 0

    def setup(self, ctx: Any, path: str, ids: list[int]) -> tuple[dict[int, str], float, int]:
        module, _, name = path.partition(":")
        cls = getattr(importlib.import_module(module), name)
        errors: dict[int, str] = {}
        started = time.monotonic()

        def build(i: int) -> None:
            for attempt in range(SETUP_ATTEMPTS):
                try:
                    p = cls(ctx, i)
                    p.setup()
                    self.participants[i] = p
                    errors.pop(i, None)
                    return
                except Exception as err:
                    errors[i] = _error(err)
                    if attempt + 1 < SETUP_ATTEMPTS:
                        self.retries += 1
                        time.sleep(0.2)

        threads = [threading.Thread(target=build, args=(i,), daemon=True) for i in ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join(ctx.deadline_s)
        for i in ids:
            if i not in self.participants and i not in errors:
                errors[i] = f"not connected within {ctx.deadline_s:g} s"
        retries, self.retries = self.retries, 0
        return errors, time.monotonic() - started, retries

    def kill(self, ids: list[int]) -> dict[int, str]:
        errors = {}
        for i in ids:
            try:
                self.participants.pop(i).kill()
            except Exception as err:
                errors[i] = _error(err)
        return errors

    def arm(self, op: str, ids: list[int]) -> int:
        self.op, self.results, self.release, self.armed_ids = op, {}, threading.Event(), list(ids)
        self.armed = [threading.Thread(target=self._one, args=(i,), daemon=True) for i in ids]
        for t in self.armed:
            t.start()
        return len(self.armed)

    def _one(self, i: int) -> None:
        self.release.wait()
        try:
            self.participants[i].run(self.op)
            self.results[i] = (time.monotonic_ns(), "")
        except Exception as err:
            self.results[i] = (None, _error(err))

    def go(self, release_ns: int, wait_s: float) -> tuple[list[Result], float, int]:
        cpu = _cpu()
        time.sleep(max(0.0, (release_ns - time.monotonic_ns()) / 1e9))
        late = time.monotonic_ns() - release_ns
        self.release.set()
        deadline = time.monotonic() + wait_s
        for t in self.armed:
            t.join(max(0.0, deadline - time.monotonic()))
        out: list[Result] = []
        for i in self.armed_ids:
            done, err = self.results.get(i, (None, f"no result within {wait_s:g} s"))
            out.append((i, done, err))
        return out, _cpu() - cpu, late

    def close(self) -> None:
        for p in self.participants.values():
            try:
                p.close()
            except Exception:
                continue
        self.participants.clear()

    def serve(self) -> None:
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                return
            kind = msg[0]
            if kind == "setup":
                self.conn.send(("ready", *self.setup(*msg[1:])))
            elif kind == "kill":
                self.conn.send(("killed", self.kill(msg[1])))
            elif kind == "arm":
                self.conn.send(("armed", self.arm(msg[1], msg[2])))
            elif kind == "go":
                self.conn.send(("done", *self.go(msg[1], msg[2])))
            elif kind == "reset":
                self.close()
                self.conn.send(("reset",))
            elif kind == "close":
                self.close()
                self.conn.send(("closed",))
                return


def main(conn: Connection, log: str, resolver: str) -> None:
    set_pdeathsig()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    redirect_output(log)
    note = system.isolate_resolver(Path(resolver)) if resolver else ""
    os.environ.update(ENVIRONMENT)
    system.raise_fd_limit()
    threading.stack_size(STACK_BYTES)
    conn.send(("started", os.getpid(), note))
    Worker(conn).serve()
    os._exit(0)  # participant threads blocked past their deadline must not hold the exit
