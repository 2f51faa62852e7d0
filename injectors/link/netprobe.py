"""Small TCP probes across a topology: a sink/echo server and clients that measure.

Link faults are only worth their name if their effect is seen on real TCP traffic, and
the NFQUEUE stage's own cost has to be measured before its figures mean anything. This
module is the instrument for both: a server that runs inside one host namespace (a
separate process that :func:`injectors.link.netns.enter`\\ s it, as a rank does) and clients
that a caller runs in another namespace with :func:`injectors.link.netns.run_in`.

Protocol: the client sends one JSON line. ``{"op": "sink", "n": N}``: N bytes of a fixed
pattern follow; the server checks every byte against the pattern and answers one JSON
line ``{"n", "bad_bytes", "seconds"}`` (bad bytes that TCP accepted = silent corruption).
``{"op": "echo"}``: the server echoes until end of file. Traffic only ever goes to the
addresses the caller names (the topology's 198.18.0.0/15 ones); the server gives up after
``lifetime_s`` on its own, so a forgotten one cannot linger.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from injectors.link import netns

CHUNK = 65536
PATTERN = bytes(range(256)) * (CHUNK // 256)


class Server:
    """``python -m injectors.link.netprobe serve`` in a host namespace, as a context manager."""

    def __init__(self, namespace: str, address: str, *, port: int = 0, lifetime_s: float = 120.0) -> None:
        argv = [
            sys.executable,
            "-m",
            "injectors.link.netprobe",
            "serve",
            "--namespace",
            namespace,
            "--address",
            address,
            "--port",
            str(port),
            "--lifetime",
            str(lifetime_s),
        ]
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.address = address
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 15)
        line = self.proc.stdout.readline().decode() if ready else ""
        if not line.startswith("listening "):
            err = self.close()
            raise RuntimeError(f"probe server `{' '.join(argv)}` did not start: {line.strip()!r} {err[-500:]}")
        self.port = int(line.split()[1])

    def close(self) -> str:
        """Kill the server; returns what it wrote to stderr."""
        if self.proc.poll() is None:
            self.proc.kill()
        _, err = self.proc.communicate(timeout=10)
        return err.decode(errors="replace") if err else ""

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def send(address: str, port: int, nbytes: int, *, timeout_s: float = 20.0) -> dict[str, Any]:
    """Send ``nbytes`` of the pattern; the server's verdict plus the client's timing."""
    t0 = time.monotonic()
    with socket.create_connection((address, port), timeout=timeout_s) as s:
        s.sendall(json.dumps({"op": "sink", "n": nbytes}).encode() + b"\n")
        left = nbytes
        while left:
            n = min(left, CHUNK)
            s.sendall(PATTERN[:n])
            left -= n
        reply = _readline(s)
    seconds = time.monotonic() - t0
    verdict = json.loads(reply)
    return {**verdict, "client_seconds": round(seconds, 4), "mbit_s": round(nbytes * 8 / seconds / 1e6, 1)}


def rtt(address: str, port: int, *, count: int = 20, size: int = 64, timeout_s: float = 10.0) -> list[float]:
    """Round-trip times (s) of ``count`` small echoes on one connection (TCP_NODELAY)."""
    out = []
    with socket.create_connection((address, port), timeout=timeout_s) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b'{"op": "echo"}\n')
        msg = PATTERN[:size]
        for _ in range(count):
            t0 = time.monotonic()
            s.sendall(msg)
            got = 0
            while got < size:
                chunk = s.recv(size - got)
                if not chunk:
                    raise ConnectionError("echo server closed the connection")
                got += len(chunk)
            out.append(time.monotonic() - t0)
    return out


def stage_overhead(topology: netns.Topology, *, nbytes: int = 8 << 20, repeats: int = 2) -> dict[str, Any]:
    """Throughput and round trip h1 -> h0 without and with the NFQUEUE stage passing
    everything through (no delay, no corruption).

    The figure to report beside every NFQUEUE-served fault: whatever the stage does to a
    workload when it delays nothing is its own cost, not the fault's.
    """
    from injectors.base import Target
    from injectors.link.faults import Delay  # here, not at the top: faults have no use for probes

    src, dst = topology.hosts[1], topology.hosts[0]

    def measure(srv: Server) -> tuple[float, float]:
        mbit = max(netns.run_in(src.namespace, send, dst.address, srv.port, nbytes)["mbit_s"] for _ in range(repeats))
        rtt_s = statistics.median(netns.run_in(src.namespace, rtt, dst.address, srv.port, count=20))
        return mbit, rtt_s

    with Server(dst.namespace, dst.address, lifetime_s=60) as srv:
        clean, clean_rtt = measure(srv)
        stage = Delay(delay_ms=0, duration_s=0, mechanism="nfqueue")
        stage.inject(Target(ranks=(), pids=(), namespaces=(dst.namespace,)))
        try:
            through, through_rtt = measure(srv)
        finally:
            stage.undo()
    return {
        "clean_mbit_s": clean,
        "passthrough_mbit_s": through,
        "slowdown": round(clean / through, 2) if through else float("inf"),
        "clean_rtt_us": round(clean_rtt * 1e6, 1),
        "passthrough_rtt_us": round(through_rtt * 1e6, 1),
        "stage": stage.report.get(dst.namespace, {}),
    }


def _readline(s: socket.socket) -> bytes:
    buf = bytearray()
    while not buf.endswith(b"\n"):
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError(f"peer closed after {bytes(buf)!r}")
        buf += chunk
    return bytes(buf)


def _handle(conn: socket.socket) -> None:
    with conn:
        conn.settimeout(60)
        header = bytearray()
        while not header.endswith(b"\n"):
            b = conn.recv(1)
            if not b:
                return
            header += b
        req = json.loads(header)
        if req["op"] == "echo":
            while chunk := conn.recv(65536):
                conn.sendall(chunk)
            return
        t0, left, bad = time.monotonic(), int(req["n"]), 0
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while left:
            want, got = min(left, CHUNK), 0
            while got < want:
                n = conn.recv_into(view[got:want])
                if not n:
                    raise ConnectionError("sender closed early")
                got += n
            if view[:want] != PATTERN[:want]:
                bad += sum(1 for a, b in zip(view[:want], PATTERN[:want], strict=True) if a != b)
            left -= want
        conn.sendall(
            json.dumps({"n": int(req["n"]), "bad_bytes": bad, "seconds": round(time.monotonic() - t0, 4)}).encode()
            + b"\n"
        )


def _serve(namespace: str, address: str, port: int, lifetime_s: float) -> int:
    netns.enter(namespace)  # single-threaded here: the whole process moves
    srv = socket.create_server((address, port), reuse_port=False)
    srv.settimeout(0.5)
    print("listening", srv.getsockname()[1], flush=True)
    deadline, parent = time.monotonic() + lifetime_s, os.getppid()
    while time.monotonic() < deadline and os.getppid() == parent:  # ends with whoever started it
        try:
            conn, _ = srv.accept()
        except TimeoutError:
            continue
        threading.Thread(target=_handle, args=(conn,), daemon=True).start()
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m injectors.link.netprobe")
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="sink/echo server inside a namespace")
    s.add_argument("--namespace", required=True)
    s.add_argument("--address", required=True)
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--lifetime", type=float, default=120.0)
    args = parser.parse_args(argv)
    return _serve(args.namespace, args.address, args.port, args.lifetime)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
