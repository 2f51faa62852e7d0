"""A scale sweep, point by point: for each coordinator and participant count, a fresh
coordinator process, the participants spread over worker processes, every operation
released to all of them at one instant, and what each participant, the coordinator and
the kernel saw.

Per operation it records the participants' latencies from the release (p50, p95 and the
last one: when all had their result), the coordinator's CPU seconds and the bytes it
sent and received on its port, the participants' own CPU seconds, and how late the
release reached the workers. A coordinator's sweep stops at the first size it cannot
do, and the reason is the limit named: descriptors, ephemeral ports, thread ids or
memory (checked before the point), the time budget of an operation (a participant
without its result by ``deadline_s``), or an error.

Processes: everything is started from one forkserver of the run (``ProcessHost``), so
each carries the run's marker and a parent-death signal; the run's guard sweeps them if
the harness dies, and :meth:`Driver.close` ends them on every other path (Ctrl-C
included).

Across hosts (``fleet``, :mod:`bench.scale.remote`) the coordinator stays here, listening
on the one address the hosts reach, and the processes of participants are the hosts'
own, started by their agents and reached through the run store; each host's agent ends
them. The limits of the participants' side are then each host's, the coordinator's
(a descriptor per connection) this one's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.procs.launcher import ProcessHost
from bench.scale import servers, system, worker
from bench.scale.capacity import Capacity
from bench.scale.coordinators import Coordinator, Op
from bench.scale.records import Record, Stop
from bench.scale.spec import ScaleSpec

if TYPE_CHECKING:
    from bench.scale.remote import Fleet

RELEASE_AHEAD_S = 0.05
"""How far ahead of "now" an operation is released: every worker has the message by then."""
PER_WORKER = 2_048
"""Participants per worker process before another is started (descriptors, and a GIL
per process)."""
START_S = 120.0
"""How long a server or worker may take to start (on loaded cores)."""
THREAD_MARGIN = 1_000
MAX_THREADS = 20_000
"""Participant threads a point may start: at 24,600 (torchft's clients, 8,192 replica
groups) the load average passed 1,000, a participant process took over 3 minutes to
answer, and everything else on the machine stalled with it."""
"""Thread ids kept free for everything else on the machine."""
PORT_MARGIN = 1_000
"""Ephemeral ports kept free for everything else."""


@dataclass
class _Proc:
    process: Any
    conn: Connection
    pid: int = 0


@dataclass
class Driver:
    spec: ScaleSpec
    out: Path
    host: ProcessHost
    progress: Callable[[str], None] = print
    workers: list[_Proc] = field(default_factory=list)
    dirty: bool = False
    fleet: Fleet | None = None
    """The hosts whose processes hold the participants (``--agents-at``); None: this machine."""

    @property
    def bind(self) -> str:
        """Where the coordinator listens and the participants connect: loopback on one
        machine, else the one address the hosts reach the harness at."""
        return self.fleet.address if self.fleet is not None else "127.0.0.1"

    def __post_init__(self) -> None:
        self.ctx = self.host.context("forkserver", preload=("bench.scale.preload",))
        self.resolver = ""
        self.resolver_note = "system resolver (resolver = system)"
        if self.spec.resolver == "isolated":
            conf = self.out / "resolv.conf"
            conf.write_text(system.QUIET_RESOLVER)
            self.resolver = str(conf)
            self.resolver_note = f"isolated: a mount namespace whose resolv.conf is {system.QUIET_RESOLVER!r}"
        (self.out / "logs").mkdir(exist_ok=True)

    # --- processes -----------------------------------------------------------------

    def _recv(self, proc: _Proc, timeout_s: float, what: str) -> Any:
        if not proc.conn.poll(timeout_s):
            raise TimeoutError(f"{what}: no answer within {timeout_s:g} s")
        try:
            return proc.conn.recv()
        except EOFError:
            raise RuntimeError(f"{what}: the process exited (see {self.out / 'logs'})") from None

    def _ensure_workers(self, k: int) -> None:
        if self.dirty:
            self._stop_workers()
        while len(self.workers) < k:
            proc = self._start_worker(len(self.workers))
            msg = self._recv(proc, START_S, "a participant process")
            proc.pid = int(msg[1])
            if msg[2]:
                where = f"{self.fleet.host_of(len(self.workers)).name}: " if self.fleet is not None else ""
                self.resolver_note = f"not isolated: {where}{msg[2]}"
            self.workers.append(proc)

    def _start_worker(self, index: int) -> _Proc:
        """Process of participants ``index``: forked here, or started by its host's agent."""
        if self.fleet is not None:
            process, conn = self.fleet.start_worker(index)
            return _Proc(process, conn)  # type: ignore[arg-type]  # a Connection's send, poll and recv
        parent, child = self.ctx.Pipe()
        log = self.out / "logs" / f"worker-{index}.log"
        p = self.ctx.Process(target=worker.main, args=(child, str(log), self.resolver), daemon=True)
        p.start()
        child.close()
        return _Proc(p, parent)

    def _stop_workers(self) -> None:
        for w in self.workers:
            try:
                w.conn.send(("close",))
            except OSError:
                pass
        for w in self.workers:
            w.process.join(5)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(5)
        self.workers.clear()
        self.dirty = False

    def close(self) -> None:
        """End every process the driver started (the forkserver is the host's)."""
        self._stop_workers()

    def probe(self, name: str) -> dict[str, Any]:
        """One of :data:`bench.scale.probes.PROBES`, in a process of the run's forkserver;
        ``{"error": why}`` where it could not run."""
        from bench.scale import probes

        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=probes.main, args=(child, name), daemon=True)
        p.start()
        child.close()
        try:
            status, value = self._recv(_Proc(p, parent), START_S, f"probe {name}")
        except (TimeoutError, RuntimeError) as err:
            status, value = "error", str(err)
        finally:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
        return dict(value) if status == "ok" else {"error": str(value)}

    def _all(self, message: tuple[Any, ...] | list[tuple[Any, ...]], timeout_s: float, what: str) -> list[Any]:
        messages = message if isinstance(message, list) else [message] * len(self.workers)
        for w, m in zip(self.workers, messages, strict=True):
            w.conn.send(m)
        return [self._recv(w, timeout_s, what) for w in self.workers]

    # --- limits ---------------------------------------------------------------------

    def limit(self, c: Coordinator, n: int) -> tuple[str, str] | None:
        """(limit, why) when the coordinator (here) or the participants' hosts (this
        machine, or each host of the fleet) cannot hold ``n`` participants of ``c``."""
        fds = system.fd_limit()
        if n * c.connections + 64 > fds:
            return "descriptors", f"the coordinator would hold {n * c.connections:,} connections; RLIMIT_NOFILE {fds:,}"
        for where, m, k, cap in self._sides(c, n):
            why = side_limit(c, where, m, k, cap)
            if why is not None:
                return why
        return None

    def _sides(self, c: Coordinator, n: int) -> list[tuple[str, int, int, Capacity]]:
        """Each host of the participants' side: (its name, "" on one machine; the
        participants it would hold; its processes of them; what it holds now)."""
        if self.fleet is None:
            return [("", n, self.workers_for(c, n), Capacity.here())]
        caps = self.fleet.capacities()
        k = self.workers_for(c, n)
        held: dict[str, list[int]] = {}
        for i, part in enumerate(np.array_split(np.arange(n), k)):
            held.setdefault(self.fleet.host_of(i).name, []).append(len(part))
        return [(f"{h}: ", sum(parts), len(parts), caps[h]) for h, parts in held.items()]

    def workers_for(self, c: Coordinator, n: int) -> int:
        """Processes of participants for ``n`` of ``c``: on one machine 2 or more, up to
        ``max_workers``; across hosts as many on each host as its share needs (up to
        ``max_workers`` a host), at least one a host."""
        if self.fleet is None:
            want = max(2, math.ceil(n / PER_WORKER), math.ceil(n * c.descriptors / (system.fd_limit() / 2)))
            return max(1, min(n, want, self.spec.max_workers))
        hosts = len(self.fleet.links)
        share = math.ceil(n / hosts)
        fds = min(link.capacity.descriptors if link.capacity else system.fd_limit() for link in self.fleet.links)
        each = max(1, math.ceil(share / PER_WORKER), math.ceil(share * c.descriptors / (fds / 2)))
        return max(1, min(n, max(2, hosts * min(each, self.spec.max_workers))))

    # --- a point ----------------------------------------------------------------------

    def sweep(self, c: Coordinator) -> Iterator[Record | Stop]:
        """Every size of the spec for ``c``: an operation that cannot be done at one size
        (and those that need it) is not attempted at larger ones; the others go on."""
        stopped: set[str] = set()

        def live(ops: list[Op]) -> list[Op]:
            return [o for o in ops if o.name not in stopped and not stopped.intersection(o.needs)]

        for n in self.spec.sizes:
            ops = live(list(c.ops))
            if not ops:
                return
            limit = self.limit(c, n)
            if limit is not None:
                yield Stop(c.name, n, *limit)
                return
            for rep in range(self.spec.repeats_at(n)):
                todo = live(ops)
                while todo:
                    records = self.point(c, n, rep, todo)
                    yield from records
                    bad = next((r for r in records if not r.ok), None)
                    if bad is None:
                        break
                    late = bad.error.startswith(("no result within", "not connected within"))
                    kind = "time budget" if late else "error"
                    if bad.op not in {o.name for o in todo}:
                        yield Stop(c.name, n, kind, bad.error)
                        return
                    yield Stop(c.name, n, kind, f"{bad.op}: {bad.error}", op=bad.op)
                    stopped.add(bad.op)
                    ran = {r.op for r in records}
                    todo = [o for o in live(todo) if o.name not in ran]

    def point(self, c: Coordinator, n: int, rep: int, ops: list[Op]) -> list[Record]:
        k = self.workers_for(c, n)
        self._ensure_workers(k)
        active = self.workers[:k]
        parent, child = self.ctx.Pipe()
        log = self.out / "logs" / f"{c.name}-{n}-{rep}.server.log"
        knobs = self.spec.knobs()
        server = self.ctx.Process(
            target=servers.main, args=(child, c.server, n, knobs, str(log), self.resolver, self.bind), daemon=True
        )
        server.start()
        child.close()
        proc = _Proc(server, parent)
        records: list[Record] = []
        try:
            msg = self._recv(proc, START_S, "the coordinator")
            if msg[0] != "ready":
                records = [Record(c.name, ops[0].name, n, rep, n, error=f"coordinator: {msg[1]}")]
            else:
                _, address, port, pid = msg
                if self.fleet is not None:
                    self.fleet.begin_point(k)
                records = self._ops(c, ops, n, rep, active, address, int(port), int(pid), knobs)
            if self.fleet is not None:  # the hosts the point's processes were on, their clocks' error
                hosts, err = self.fleet.end_point(k, {"coordinator": c.name, "n": n, "rep": rep})
                for r in records:
                    r.hosts, r.clock_err_s = hosts, err
        finally:
            try:
                parent.send(("stop",))
            except OSError:
                pass
            server.join(10)
            if server.is_alive():
                server.kill()
                server.join(5)
        return records

    def _ops(
        self,
        c: Coordinator,
        ops: list[Op],
        n: int,
        rep: int,
        active: list[_Proc],
        address: str,
        port: int,
        pid: int,
        knobs: dict[str, Any],
    ) -> list[Record]:
        from bench.scale.participants import Context

        d = self.spec.deadline_s
        ctx = Context(
            coordinator=c.name, n=n, address=address, port=port, rep=rep, deadline_s=d, knobs=knobs, host=self.bind
        )
        chunks = [list(part) for part in np.array_split(np.arange(n), len(active))]
        saved, self.workers = self.workers, active
        records: list[Record] = []
        try:
            setup_errors: dict[int, str] = {}
            started = time.monotonic()
            setups = [("setup", ctx, c.participant, [int(i) for i in ch]) for ch in chunks]
            retries = 0
            for reply in self._all(setups, 3 * d + 30, "setup"):
                setup_errors.update(reply[1])
                retries += reply[3]
            setup_s = time.monotonic() - started
            current = ops[0].name
            if setup_errors:
                i, why = next(iter(setup_errors.items()))
                return [
                    Record(
                        c.name,
                        ops[0].name,
                        n,
                        rep,
                        n,
                        error=f"not connected within {d:g} s"
                        if "within" in why
                        else f"setup of participant {i}: {why}",
                    )
                ]
            victim = n - 1
            killed = False
            current = ops[0].name
            for op in ops:
                current = op.name
                if op.victim and not killed and not c.victim_runs:
                    self.workers[-1].conn.send(("kill", [victim]))
                    self._recv(self.workers[-1], d + 30, "kill")
                    killed = True
                ids = [[int(i) for i in ch if not (killed and i == victim)] for ch in chunks]
                rec = self._op(c.name, op.name, n, rep, ids, pid, port, exclude=victim if op.victim else None)
                rec.setup_s, rec.setup_retries, rec.workers = setup_s, retries, len(active)
                records.append(rec)
                self.progress(_line(rec))
                if not rec.ok:
                    self.dirty = True
                    break
            self._all(("reset",), d + 30, "reset")
        except (TimeoutError, RuntimeError) as err:
            # A process that did not answer in time (a machine overwhelmed) or exited:
            # the operation under way cannot be done here, at this size.
            self.dirty = True
            late = isinstance(err, TimeoutError)
            why = f"no result within {d:g} s ({err})" if late else str(err)
            records.append(Record(c.name, current if records or late else ops[0].name, n, rep, n, error=why))
        finally:
            self.workers = saved
        return records

    def _op(
        self,
        coordinator: str,
        op: str,
        n: int,
        rep: int,
        ids: list[list[int]],
        pid: int,
        port: int,
        exclude: int | None,
    ) -> Record:
        d = self.spec.deadline_s
        expected = sum(len(x) for x in ids) - (1 if exclude is not None and any(exclude in x for x in ids) else 0)
        rec = Record(coordinator, op, n, rep, expected)
        self._all([("arm", op, x) for x in ids], d + 30, "arm")
        cpu0, wire0, svc0 = system.cpu_s(pid), system.wire(port), system.service(pid)
        release = time.monotonic_ns() + int(RELEASE_AHEAD_S * 1e9)
        replies = self._all(("go", release, d), d + 60, op)
        cpu1, wire1, svc1 = system.cpu_s(pid), system.wire(port), system.service(pid)
        lat, errors = [], []
        for _, results, _, _ in replies:
            for i, done_ns, err in results:
                if i == exclude:
                    continue
                if done_ns is None:
                    errors.append(err)
                else:
                    lat.append((done_ns - release) / 1e9)
        rec.done = len(lat)
        rec.error = errors[0] if errors else ""
        if lat:
            rec.p50_s, rec.p95_s = (float(x) for x in np.percentile(lat, [50, 95]))
            rec.all_s = max(lat) if rec.done == expected else math.nan
        rec.client_cpu_s = sum(r[2] for r in replies)
        rec.late_s = max(r[3] for r in replies) / 1e9
        if cpu0 is not None and cpu1 is not None:
            rec.server_cpu_s = cpu1 - cpu0
        if wire0 is not None and wire1 is not None:
            rec.sent_bytes, rec.received_bytes = wire1.sent - wire0.sent, wire1.received - wire0.received
            rec.connections = wire1.connections
            rec.requests = wire1.segments_in - wire0.segments_in
            rec.replies = wire1.segments_out - wire0.segments_out
        if svc0 is not None and svc1 is not None:
            rec.server_run_s = (svc1.run_ns - svc0.run_ns) / 1e9
            rec.server_busy_s = (svc1.run_ns + svc1.wait_ns - svc0.run_ns - svc0.wait_ns) / 1e9
        return rec


def side_limit(c: Coordinator, where: str, n: int, k: int, cap: Capacity) -> tuple[str, str] | None:
    """The participants' side of :meth:`Driver.limit` on one host (``where``: "" on one
    machine, else ``hN: ``): ``n`` participants over ``k`` processes."""
    if math.ceil(n / k) * c.descriptors + 64 > cap.descriptors:
        return "descriptors", f"{where}{c.descriptors} per participant over {k} processes"
    if n * c.connections > cap.ephemeral_ports - PORT_MARGIN:
        return "ephemeral ports", (
            f"{where}{n * c.connections:,} connections to one address and port; {cap.ephemeral_ports:,} local "
            "ports (net.ipv4.ip_local_port_range)"
        )
    used = cap.threads_in_use
    if n * c.threads + used + THREAD_MARGIN > cap.pid_max:
        return "thread ids", (
            f"{where}{n * c.threads:,} threads ({c.threads} a participant) + {used:,} in use > kernel.pid_max "
            f"{cap.pid_max:,}"
        )
    if n * c.threads > MAX_THREADS:
        return "threads", (
            f"{where}{n * c.threads:,} threads ({c.threads} a participant) > {MAX_THREADS:,}, the most this "
            "machine runs and stays responsive"
        )
    need = n * (256e3 * c.threads + 64e3 * c.connections)
    if need > 0.8 * cap.memory_available_bytes:
        return (
            "memory",
            f"{where}about {need / 1e9:.1f} GB for {n:,} participants; {cap.memory_available_bytes / 1e9:.1f} GB free",
        )
    return None


def _line(r: Record) -> str:
    if not r.ok:
        return f"  {r.coordinator} N={r.n:,} rep {r.rep}: {r.op}: {r.done}/{r.expected} done: {r.error}"
    return (
        f"  {r.coordinator} N={r.n:,} rep {r.rep}: {r.op}: p50 {r.p50_s:.3g} s, p95 {r.p95_s:.3g} s, "
        f"all {r.all_s:.3g} s; coordinator {r.server_cpu_s:.2f} CPU-s, {r.sent_bytes / 1e6:.3g} MB out"
    )
