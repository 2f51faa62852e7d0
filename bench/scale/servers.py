"""The coordinator's process: one server, on one address only, until told to stop.

The address is loopback on one machine; across hosts (``ftbench scale --agents-at``) it
is the one address the hosts reach the harness at, never every interface.

- ``tcpstore-libuv`` / ``tcpstore-legacy``: torch's ``TCPStore`` server with either
  backend, on a socket ftbench bound to that address (:func:`bench.procs.store.bound_store`:
  a store made the usual way listens on every interface), or with ``server_family =
  "v4-mapped"`` (one machine only) an IPv6 socket bound to ::ffff:127.0.0.1;
- ``lighthouse``: torchft's ``LighthouseServer``, bound to ``ADDRESS:0``; its clients are
  given ``http://ADDRESS:PORT``.

A process of its own, so that its CPU time is its own (read from ``/proc``), its
connections are the only ones on its port, and its descriptors are not the clients'.
It tells the driver where it listens through its pipe, then blocks on the pipe: a
message or the pipe's end (the driver gone) ends it.
"""

from __future__ import annotations

import os
import signal
import socket
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.procs.hygiene import redirect_output, set_pdeathsig
from bench.scale import system

BACKLOG = 4096
"""The listening queue (the kernel caps it at net.core.somaxconn, 4096 here)."""


def _v4_mapped() -> socket.socket:
    """An IPv6 socket listening on ::ffff:127.0.0.1 only: loopback, with peers that look
    v4-mapped, as they do to a server listening on every interface."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("::ffff:127.0.0.1", 0))
    sock.listen(BACKLOG)
    return sock


def _url_host(address: str) -> str:
    """An address as the host part of ``HOST:PORT`` (an IPv6 one in brackets)."""
    return f"[{address}]" if ":" in address else address


def main(
    conn: Connection, server: str, n: int, knobs: dict[str, Any], log: str, resolver: str, bind: str = "127.0.0.1"
) -> None:
    set_pdeathsig()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    redirect_output(log)
    if resolver:
        why = system.isolate_resolver(Path(resolver))
        if why:
            os.write(2, f"resolver not isolated: {why}\n".encode())
    system.raise_fd_limit()
    keep: Any
    try:
        if server in ("tcpstore-libuv", "tcpstore-legacy"):
            from bench.procs.store import bound_store

            sock = _v4_mapped() if knobs.get("server_family") == "v4-mapped" else None
            keep = bound_store(bind, timeout_s=3600, libuv=server == "tcpstore-libuv", sock=sock, backlog=BACKLOG)
            conn.send(("ready", f"{_url_host(bind)}:{keep.port}", keep.port, os.getpid()))
        elif server == "lighthouse":
            from torchft._torchft import LighthouseServer

            keep = LighthouseServer(
                bind=f"{_url_host(bind)}:0",
                min_replicas=max(1, n - 1),
                join_timeout_ms=int(knobs["lh_join_timeout_ms"]),
                quorum_tick_ms=int(knobs["lh_quorum_tick_ms"]),
                heartbeat_timeout_ms=int(knobs["lh_heartbeat_timeout_ms"]),
            )
            # Its address() names this host by its host name, which another host may not
            # resolve (or resolve to its own loopback): the clients get the bound address.
            port = int(keep.address().rsplit(":", 1)[1])
            conn.send(("ready", f"http://{_url_host(bind)}:{port}", port, os.getpid()))
        else:
            raise ValueError(server)
    except Exception as err:  # reported to the driver, which records it as the point's failure
        conn.send(("error", f"{type(err).__name__}: {err}"))
        return
    try:
        conn.recv()
    except (EOFError, OSError):
        pass
    if server == "lighthouse":
        keep.shutdown()
