"""A host's part of ``ftbench scale --agents-at``: run by the host agent the cluster
started (``ftbench host --serve``) when the harness hands it a scale session.

The agent starts the host's processes of participants (:mod:`bench.scale.worker`) from
its forkserver, which imported the stacks once, and relays between each one's local
pipe and the run store: a request from the harness is opened (its MAC), checked field by
field and turned into the tuple the process takes (:func:`bench.scale.remote.decode_request`:
the participants' code is named by the coordinators' table, never by the message), and
each answer goes back sealed. On the harness's request it measures the host's clock
against the head's (:class:`bench.hosts.clock.StorePinger`) and reads what the host can
hold (:class:`bench.scale.capacity.Capacity`). It counts a beat up twice a second, by
which the harness tells a lost host from a slow one.

Every process it starts carries the agent's marker and dies with the forkserver, which
dies with the agent; the session ends, and every process of it is killed, when the
harness says so, when the run store goes away (the harness died), or after ``idle_s``
without a word from the harness. The serving agent then sweeps its marker, as after a
trial.

Logs: a process's output goes to ``RUNDIR/logs/HOST/`` where the run directory is on a
file system this host shares with the head, else to a directory of its own under the
host's temporary directory, which the harness records in scale.json.
"""

from __future__ import annotations

import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.hosts.agent import AgentHost, post
from bench.hosts.auth import Forged, Sealer
from bench.hosts.clock import StorePinger, resolution_ns
from bench.scale import system, worker
from bench.scale.capacity import Capacity
from bench.scale.remote import (
    BEAT_S,
    MAX_TEXT,
    SERVICE,
    Channel,
    Refused,
    RequestState,
    decode_request,
    encode_reply,
)

PRELOAD = ("bench.scale.preload",)
MAX_WORKERS = 4096
"""Processes of participants one host may be asked for."""
JOIN_S = 10.0


@dataclass
class _Worker:
    index: int
    process: Any
    conn: Connection
    threads: list[threading.Thread] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    inbox: Channel | None = None
    """The harness's requests (the inbound relay's channel)."""
    outbox: Channel | None = None
    """Answers to the harness: the process's, and the relay's refusals of a request."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Held while a message is put on ``outbox`` (two relay threads put on it)."""

    def answer(self, body: dict[str, Any]) -> None:
        with self.lock:
            if self.outbox is not None:
                self.outbox.put(body)


class Session:
    """One host's side of one scale session."""

    def __init__(
        self,
        connect: Callable[[], Any],
        host: str,
        body: dict[str, Any],
        *,
        secret: str,
        nonce: str,
        say: Callable[[str], None],
    ) -> None:
        session = body.get("session")
        if not isinstance(session, str) or not re.fullmatch(r"[0-9a-f]{8,64}", session):
            raise Refused("a scale session without a session id")
        idle = body.get("idle_s")
        if not isinstance(idle, int | float) or isinstance(idle, bool) or not 10 <= idle <= 86400:
            raise Refused(f"idle_s: {idle!r}")
        self.connect, self.host, self.say = connect, host, say
        self.idle_s = float(idle)
        self.sealer = Sealer(secret, f"{SERVICE}:{nonce}:{session}")
        self.base = f"{SERVICE}/{session}/{host}"
        self.logs = _logs_dir(str(body.get("rundir", "")), host)
        self.resolver = ""
        if body.get("resolver") is True:
            conf = self.logs / "resolv.conf"
            conf.write_text(system.QUIET_RESOLVER)
            self.resolver = str(conf)
        self.rank_host = AgentHost()
        self.workers: dict[int, _Worker] = {}
        self.heard = time.monotonic()
        self.stopping = threading.Event()

    def refused(self, why: str) -> None:
        self.say(f"scale session: refused {why}")

    # --- the control channel -----------------------------------------------------

    def run(self) -> int:
        """Serve until the harness ends the session (0), the store goes away (3) or the
        harness says nothing for ``idle_s`` (4)."""
        store = self.connect()
        ctl_in = Channel(store, self.sealer, f"{self.base}/ctl/in", self.refused)
        ctl_out = Channel(store, self.sealer, f"{self.base}/ctl/out", self.refused)
        beat = threading.Thread(target=self._beat, name="scale-beat", daemon=True)
        beat.start()
        hello = {"logs": str(self.logs), "capacity": Capacity.here().as_dict(), "resolution_ns": resolution_ns()}
        ctl_out.put(hello)
        self.say(f"scale session: serving, logs in {self.logs}")
        try:
            while True:
                if not ctl_in.wait(self.idle_s):
                    if time.monotonic() - self.heard > self.idle_s:
                        self.say(f"scale session: no word from the harness within {self.idle_s:g} s")
                        return 4
                    continue
                try:
                    request = ctl_in.take()
                except Forged as err:
                    self.refused(str(err))
                    continue
                self.heard = time.monotonic()
                op = request.get("op") if isinstance(request, dict) else None
                try:
                    reply = self.control(store, request)
                except (Refused, OSError, RuntimeError, ValueError) as err:
                    reply = {"error": f"{type(err).__name__}: {err}"[:MAX_TEXT]}
                ctl_out.put(reply)
                if op == "end":
                    return 0
        except (RuntimeError, OSError) as err:  # the store (the harness) went away
            self.say(f"scale session: the harness went away: {err}")
            return 3
        finally:
            self.close()

    def control(self, store: Any, request: Any) -> dict[str, Any]:
        if not isinstance(request, dict):
            raise Refused("not a control message")
        op = request.get("op")
        if op == "start":
            return self.start(_index(request.get("worker")))
        if op == "kill":
            w = self.workers.get(_index(request.get("worker")))
            if w is not None and w.process.is_alive():
                w.process.kill()
            return {"ok": True}
        if op == "capacity":
            return {"capacity": Capacity.here().as_dict()}
        if op == "clock":
            prefix = request.get("prefix")
            if not isinstance(prefix, str) or not re.fullmatch(re.escape(self.base) + r"/clock/[0-9]{1,9}", prefix):
                raise Refused(f"a clock prefix outside this session: {prefix!r}")
            pinger = StorePinger(store, prefix, self.sealer)
            offset = pinger.measure()
            pinger.bye()
            return {"offset": offset.as_dict()}
        if op == "end":
            self.close()
            return {"ok": True}
        raise Refused(f"no such control message: {op!r}")

    def _beat(self) -> None:
        """Count ``BASE/beat`` up every BEAT_S on a connection of its own until the
        session ends or the store goes away."""
        try:
            store = self.connect()
            n = 0
            while not self.stopping.is_set():
                n += 1
                post(store, self.sealer, f"{self.base}/beat", n)
                self.stopping.wait(BEAT_S)
        except Exception:  # the store went away: the control loop ends the session
            return

    # --- processes of participants ---------------------------------------------------

    def start(self, index: int) -> dict[str, Any]:
        for old in [w for w in self.workers.values() if w.stop.is_set() and not w.process.is_alive()]:
            self._forget(old)
        if index in self.workers:
            raise Refused(f"process {index} was started already")
        if len(self.workers) >= MAX_WORKERS:
            raise Refused(f"more than {MAX_WORKERS} processes on one host")
        ctx = self.rank_host.context("forkserver", preload=PRELOAD)
        parent, child = ctx.Pipe()
        log = self.logs / f"worker-{index}.log"
        p = ctx.Process(target=worker.main, args=(child, str(log), self.resolver), daemon=True)
        p.start()
        child.close()
        w = _Worker(index, p, parent)
        self.workers[index] = w
        # A connection each for the two relays: one blocks waiting for the next request.
        w.inbox = Channel(self.connect(), self.sealer, f"{self.base}/w{index}/in", self.refused)
        w.outbox = Channel(self.connect(), self.sealer, f"{self.base}/w{index}/out", self.refused)
        for target, name in ((self._inbound, "in"), (self._outbound, "out")):
            t = threading.Thread(target=target, args=(w,), name=f"scale-w{index}-{name}", daemon=True)
            t.start()
            w.threads.append(t)
        return {"ok": True, "pid": p.pid}

    def _inbound(self, w: _Worker) -> None:
        """The harness's requests to process ``w``, checked, down its pipe."""
        ch = w.inbox
        assert ch is not None
        state = RequestState()
        while not w.stop.is_set():
            try:
                if not ch.wait(self.idle_s):
                    continue
                body = ch.take()
            except Forged as err:
                self.refused(str(err))
                continue
            except Exception:  # the store went away
                return
            if w.stop.is_set() or (isinstance(body, dict) and body.get("op") == "wake"):
                return
            self.heard = time.monotonic()
            try:
                msg = decode_request(body, state)
            except Refused as err:
                self.refused(f"a request to process {w.index}: {err}")
                w.answer({"op": "refused", "why": str(err)[:MAX_TEXT]})
                continue
            if msg[0] == "setup":
                from bench.scale.participants import Context

                msg = ("setup", Context(**msg[1]), *msg[2:])
            try:
                w.conn.send(msg)
            except OSError:
                return

    def _outbound(self, w: _Worker) -> None:
        """Process ``w``'s answers, sealed, to the harness; then its exit."""
        assert w.outbox is not None
        try:
            while True:
                if not w.conn.poll(0.5):
                    if w.stop.is_set() and not w.process.is_alive():
                        break
                    continue
                try:
                    msg = w.conn.recv()  # a local pipe from this host's own process
                except (EOFError, OSError):
                    break
                w.answer(encode_reply(msg))
            w.process.join(JOIN_S)
            code = w.process.exitcode
            w.answer({"op": "exited", "code": code})
            post(w.outbox.store, self.sealer, f"{self.base}/w{w.index}/exit", code)
            w.stop.set()
            if w.inbox is not None:  # the inbound relay waits for a request nobody will send
                post(w.outbox.store, self.sealer, w.inbox.key, {"op": "wake"})
        except Exception:  # the store went away: the control loop ends the session
            return

    def _forget(self, w: _Worker) -> None:
        """A process that exited, once its relays are done with it."""
        for t in w.threads:
            t.join(JOIN_S)
        w.conn.close()
        self.workers.pop(w.index, None)

    def close(self) -> None:
        """Kill every process of the session and let its relay threads go."""
        self.stopping.set()
        for w in self.workers.values():
            w.stop.set()
            if w.process.is_alive():
                w.process.kill()
        for w in self.workers.values():
            w.process.join(JOIN_S)
        for w in self.workers.values():  # wake each relay blocked on its next request
            if w.inbox is None or w.outbox is None:
                continue
            try:  # on a connection it has (a new one to a store that is gone would retry for long)
                post(w.outbox.store, self.sealer, w.inbox.key, {"op": "wake"})
            except Exception:  # the store is gone: the relays' waits ended with it
                continue
        for w in self.workers.values():
            for t in w.threads:
                t.join(JOIN_S)
            w.conn.close()
        self.workers.clear()


def _index(v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1_000_000:
        raise Refused(f"a process index: {v!r}")
    return v


def _logs_dir(rundir: str, host: str) -> Path:
    """``RUNDIR/logs/HOST`` where the head's run directory is visible here (a shared file
    system), else a directory of this host's own."""
    run = Path(rundir) if rundir else None
    if run is not None and run.is_absolute() and (run / "logs").is_dir():
        logs = run / "logs" / host
        logs.mkdir(exist_ok=True)
        return logs
    return Path(tempfile.mkdtemp(prefix=f"ftbench-scale-{host}-"))


def serve(
    connect: Callable[[], Any],
    host: str,
    body: dict[str, Any],
    *,
    secret: str,
    nonce: str,
    say: Callable[[str], None],
) -> int:
    """Serve one scale session for the harness (the serving agent calls it)."""
    try:
        session = Session(connect, host, body, secret=secret, nonce=nonce, say=say)
    except Refused as err:
        say(f"refused a scale session: {err}")
        return 2
    return session.run()
