"""The userspace NFQUEUE stage: delay, jitter and payload corruption where netem is missing.

Kernels without ``sch_netem`` (like the machines this suite is developed on) cannot
delay or corrupt packets in the kernel. Instead an iptables ``NFQUEUE`` rule on the
victim's INPUT hands each arriving packet to this daemon, which holds it for the delay
(uniform jitter, as netem's default) and/or flips a payload bit, then gives the verdict.

Why the receiver's ingress: on the sender's OUTPUT, a queued skb still counts against
the socket's send budget (TCP small queues), so TCP throttles itself instead of seeing
a delayed link. Why a separate process: the stage must not share a GIL with the harness,
and it lives in the victim's namespace (queues are per namespace).

The stage costs something of its own: each packet crosses to userspace and back
(docs/facts.md: ~3x fewer all-reduce steps/s with pass-through alone). The daemon measures
its service time and lateness and prints them on exit; :func:`stop` returns them, and
the injector reports them beside the fault's figures.

Lifecycle: :func:`start` returns once the queue is bound (the daemon prints ``ready``).
SIGTERM/SIGINT make it accept every held packet, drain the socket and exit, printing its
statistics as one JSON line. It also exits when its parent (the harness) dies: it polls
its parent pid, which, unlike PR_SET_PDEATHSIG, does not fire when only the creating
*thread* ends. Every daemon carries ``FTBENCH_NFQUEUE=<namespace>`` in its environment so
that :func:`stop_daemons` finds leftovers by that marker alone; a leftover would hold the
queue and make the next bind fail ("Failed to create queue").

Run as ``python -m injectors.link.nfqueue run --queue N [--delay-ms D] [--jitter-ms J]
[--corrupt P] [--keep-checksum] [--seed S]`` inside the namespace; ``... stop-namespace NS``
stops the daemons of a namespace (what an undo record runs).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import os
import random
import resource
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MARKER = "FTBENCH_NFQUEUE"
QUEUE = 4242
"""Queue number used in every victim namespace (queues are per network namespace)."""
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def available() -> str | None:
    """None when the stage can run (the ``netfilterqueue`` package imports), else why not."""
    try:
        import netfilterqueue  # noqa: F401
    except ImportError as exc:
        return (
            f"the NFQUEUE stage needs the netfilterqueue package ({exc}); install: apt-get install -y "
            "libnetfilter-queue-dev gcc && pip install netfilterqueue==1.1.0"
        )
    return None


def start(
    namespace: str,
    *,
    queue: int = QUEUE,
    delay_ms: float = 0.0,
    jitter_ms: float = 0.0,
    corrupt: float = 0.0,
    fix_checksum: bool = True,
    seed: int = 0,
    ready_timeout_s: float = 10.0,
) -> subprocess.Popen[bytes]:
    """Start the daemon inside ``namespace``; return once its queue is bound."""
    argv = [
        "ip",
        "netns",
        "exec",
        namespace,
        sys.executable,
        "-m",
        "injectors.link.nfqueue",
        "run",
        "--queue",
        str(queue),
        "--delay-ms",
        str(delay_ms),
        "--jitter-ms",
        str(jitter_ms),
        "--corrupt",
        str(corrupt),
        "--seed",
        str(seed),
    ]
    if not fix_checksum:
        argv.append("--keep-checksum")
    env = dict(os.environ)
    env[MARKER] = namespace
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], ready_timeout_s)
    line = proc.stdout.readline() if ready else b""
    if line.strip() != b"ready":
        proc.kill()
        _, err = proc.communicate(timeout=10)
        detail = err.decode(errors="replace").strip().splitlines()[-3:] or ["no output"]
        if not ready:
            detail.insert(0, f"not ready within {ready_timeout_s} s")
        hint = " (a leftover queue daemon? run `ftbench cleanup`)" if b"Failed to create queue" in err else ""
        raise RuntimeError(f"NFQUEUE stage `{' '.join(argv)}` failed: {' | '.join(detail)}{hint}")
    return proc


def stop(proc: subprocess.Popen[bytes], *, timeout_s: float = 3.0) -> dict[str, Any]:
    """SIGTERM (the daemon releases what it holds), SIGKILL if it lingers; its statistics."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=10)
        return {"error": f"daemon {proc.pid} ignored SIGTERM for {timeout_s} s; killed"}
    for line in reversed(out.decode(errors="replace").splitlines()):
        if line.startswith("{"):
            stats: dict[str, Any] = json.loads(line)
            return stats
    return {"error": f"daemon {proc.pid} exited with {proc.returncode} without statistics"}


def daemons() -> dict[int, str]:
    """Live queue daemons (pid -> namespace), found by their environment marker."""
    found = {}
    wanted = f"{MARKER}=".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"injectors.link.nfqueue\0run" not in cmdline:
            continue  # `ip netns exec` before its exec, or a child that is not the daemon
        for item in env:
            if item.startswith(wanted):
                found[int(entry.name)] = item[len(wanted) :].decode(errors="replace")
    return found


def stop_daemons(
    *, namespaces: Iterable[str] | None = None, pids: Iterable[int] | None = None, timeout_s: float = 2.0
) -> list[int]:
    """SIGTERM leftover daemons (of some namespaces, some pids, or all), SIGKILL after a wait."""
    live = daemons()
    chosen = set(live)
    if namespaces is not None:
        wanted = set(namespaces)
        chosen = {p for p in chosen if live[p] in wanted}
    if pids is not None:
        chosen &= set(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in chosen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and set(daemons()) & chosen:
            time.sleep(0.02)
        if not set(daemons()) & chosen:
            break
    return sorted(chosen)


def corrupt_tcp(packet: bytes, rng: random.Random, *, fix_checksum: bool) -> bytes | None:
    """Flip one random bit of the TCP payload of an IPv4 packet; None if it has none.

    With ``fix_checksum`` the TCP checksum is recomputed, so the receiver's TCP accepts the
    wrong bytes (silent data corruption). Without it the checksum no longer matches and
    the receiver drops the segment, as with netem's ``corrupt``: that behaves as loss.
    """
    if len(packet) < 40 or packet[0] >> 4 != 4 or packet[9] != 6:
        return None
    ihl = (packet[0] & 0x0F) * 4
    total = struct.unpack_from("!H", packet, 2)[0]
    if total != len(packet):
        return None  # truncated copy: do not send a shortened packet back
    start = ihl + (packet[ihl + 12] >> 4) * 4
    if start >= total:
        return None
    data = bytearray(packet)
    data[rng.randrange(start, total)] ^= 1 << rng.randrange(8)
    if fix_checksum:
        struct.pack_into("!H", data, ihl + 16, 0)
        pseudo = bytes(data[12:20]) + struct.pack("!BBH", 0, 6, total - ihl)
        struct.pack_into("!H", data, ihl + 16, _checksum(pseudo + bytes(data[ihl:])))
    return bytes(data)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


class Stage:
    """What the daemon does to each packet: hold it for the delay (a heap by due time),
    flip a payload bit with the corruption probability, and keep its own statistics."""

    def __init__(self, *, delay_ms: float, jitter_ms: float, corrupt: float, fix_checksum: bool, seed: int) -> None:
        self.rng = random.Random(seed)
        self.delay_s, self.jitter_s = delay_ms / 1e3, jitter_ms / 1e3
        self.corrupt, self.fix_checksum = corrupt, fix_checksum
        self.passthrough = self.delay_s == 0 and self.jitter_s == 0
        self.held: list[tuple[float, int, Any]] = []  # (due, arrival order, packet): a heap
        self.order = itertools.count()
        self.packets = self.n_held = self.corrupted = self.released = 0
        self.service_ns = self.service_max_ns = 0
        self.late_sum_s = self.late_max_s = 0.0
        self.t_start, self.cpu0 = time.monotonic(), _cpu_s()

    def on_packet(self, pkt: Any) -> None:
        t0 = time.perf_counter_ns()
        self.packets += 1
        if self.corrupt and self.rng.random() < self.corrupt:
            mangled = corrupt_tcp(pkt.get_payload(), self.rng, fix_checksum=self.fix_checksum)
            if mangled is not None:
                pkt.set_payload(mangled)
                self.corrupted += 1
        if self.passthrough:
            pkt.accept()
        else:
            due = time.monotonic() + max(0.0, self.delay_s + self.rng.uniform(-self.jitter_s, self.jitter_s))
            heapq.heappush(self.held, (due, next(self.order), pkt))
            self.n_held += 1
        dt = time.perf_counter_ns() - t0
        self.service_ns += dt
        self.service_max_ns = max(self.service_max_ns, dt)

    def next_due(self) -> float | None:
        return self.held[0][0] if self.held else None

    def release(self, until: float) -> None:
        """Accept every held packet due by ``until``; lateness is the stage's error."""
        while self.held and self.held[0][0] <= until:
            due, _, pkt = heapq.heappop(self.held)
            pkt.accept()
            late = max(0.0, time.monotonic() - due)
            self.released += 1
            self.late_sum_s += late
            self.late_max_s = max(self.late_max_s, late)

    def stats(self, stopped_by: str) -> dict[str, Any]:
        n = max(1, self.packets)
        return {
            "packets": self.packets,
            "held": self.n_held,
            "corrupted": self.corrupted,
            "service_us_mean": round(self.service_ns / n / 1e3, 2),
            "service_us_max": round(self.service_max_ns / 1e3, 1),
            "late_ms_mean": round(self.late_sum_s / max(1, self.released) * 1e3, 3),
            "late_ms_max": round(self.late_max_s * 1e3, 3),
            "cpu_s": round(_cpu_s() - self.cpu0, 3),
            "wall_s": round(time.monotonic() - self.t_start, 3),
            "stopped_by": stopped_by,
        }


def serve(queue: int, stage: Stage) -> int:
    """The daemon's loop: bind, hold/corrupt/accept, release on time, flush on exit."""
    import warnings

    from netfilterqueue import COPY_META, COPY_PACKET, NetfilterQueue

    parent = os.getppid()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    stopping = {"why": ""}
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: stopping.update(why=signal.Signals(s).name))
    q = NetfilterQueue()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Socket rcvbuf limit" only says the kernel capped it
        mode = COPY_PACKET if stage.corrupt else COPY_META
        q.bind(queue, stage.on_packet, max_len=8192, mode=mode, sock_len=8192 * 4096)
    print("ready", flush=True)
    fd = q.get_fd()
    try:
        while not stopping["why"]:
            due = stage.next_due()
            wait = 0.2 if due is None else min(0.2, max(0.0, due - time.monotonic()))
            ready, _, _ = select.select([fd, wake_r], [], [], wait)
            if fd in ready:
                q.run(block=False)
            stage.release(time.monotonic())
            if os.getppid() != parent:
                stopping["why"] = "parent gone"
    finally:
        stage.passthrough = True  # from now on everything that still arrives is accepted at once
        stage.release(float("inf"))
        q.run(block=False)
        q.unbind()
    print(json.dumps(stage.stats(stopping["why"])), flush=True)
    return 0


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m injectors.link.nfqueue")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="serve one queue in the current network namespace")
    run.add_argument("--queue", type=int, default=QUEUE)
    run.add_argument("--delay-ms", type=float, default=0.0)
    run.add_argument("--jitter-ms", type=float, default=0.0)
    run.add_argument("--corrupt", type=float, default=0.0, help="probability per packet")
    run.add_argument("--keep-checksum", action="store_true", help="corrupt without fixing the TCP checksum")
    run.add_argument("--seed", type=int, default=0)
    stop_ns = sub.add_parser("stop-namespace", help="stop the daemons of a namespace (an undo record's command)")
    stop_ns.add_argument("namespace")
    args = parser.parse_args(argv)
    if args.cmd == "stop-namespace":
        stop_daemons(namespaces=[args.namespace])
        return 0
    stage = Stage(
        delay_ms=args.delay_ms,
        jitter_ms=args.jitter_ms,
        corrupt=args.corrupt,
        fix_checksum=not args.keep_checksum,
        seed=args.seed,
    )
    return serve(args.queue, stage)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
