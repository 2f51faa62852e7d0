"""c10d stores that listen where they are told, and free ports for servers that pick their own.

``TCPStore(host_name, ...)`` as a server listens on every interface: the host name is
where clients connect, not where the server binds (docs/facts.md). So every store the
harness runs is given a listening socket bound here, on the one address its clients
use (loopback on one host, the bridge address for namespaced hosts), through
``master_listen_fd``.
"""

from __future__ import annotations

import datetime
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch.distributed as dist

_SOCKETS: list[socket.socket] = []
"""Listening sockets handed to stores: kept open for the life of the process."""


def listening_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A socket listening on ``host`` only, on ``port`` (0: a free one), for a store.
    Clients that connect before the store serves it wait in its backlog."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


def bound_store(
    host: str = "127.0.0.1",
    *,
    timeout_s: float,
    port: int = 0,
    sock: socket.socket | None = None,
    libuv: bool = True,
    backlog: int | None = None,
) -> dist.TCPStore:
    """A store server listening on ``host`` only, on ``port`` (0: a free one; ``store.port``),
    or serving ``sock``, a :func:`listening_socket` made by another process; ``libuv``:
    torch's default server backend, else the legacy one; ``backlog``: the listening
    queue (the kernel caps it at ``net.core.somaxconn``)."""
    import torch.distributed as dist

    if sock is None:
        sock = listening_socket(host, port)
    if backlog is not None:
        sock.listen(backlog)
    _SOCKETS.append(sock)
    return dist.TCPStore(
        host,
        sock.getsockname()[1],
        None,
        True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=timeout_s),
        master_listen_fd=sock.fileno(),
        use_libuv=libuv,
    )


def free_port() -> int:
    """A free loopback port, for a server that must be told its port up front (a
    launcher's rendezvous) and binds it itself."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
