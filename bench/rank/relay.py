"""A tree of relays: how a value every member needs whole leaves the store O(N) times
instead of N times.

torch-reconfigure's handle exchange must give every member every peer's handle
(``dist._reconfigure`` takes them all, in rank order): N handles to each of N members,
O(N²) bytes whatever the protocol. Read from the job's store by every member, all of
them leave one process and one socket (29.7 s at 1,024 ranks with one ``get`` per key;
docs/scale.md). Here the aggregate is read from the store only by the members whose
group rank has a single nonzero digit in base ``fanout`` (the root's children); every
other member reads it from a member that already has it, its parent: its group rank
with the lowest nonzero base-``fanout`` digit cleared. A member with children serves the
value to them from a listening socket of its own (:class:`Relay`) and publishes where.

Each server, the store included, sends at most ``(fanout - 1) x ceil(log_fanout N)``
copies, so the store's bytes grow as N log N and the O(N²) bytes are spread over the
members, as a cluster's hosts and links share them; a member waits for at most
``ceil(log_fanout N)`` hops. Up to ``fanout`` members nobody relays: every member reads
the store, as before.

The relay is a plain socket (an 8-byte length, then the value) rather than a
``TCPStore`` server: a ``TCPStore`` client looks its server's address up in reverse
before it connects, which can wait seconds on a resolver (docs/scale.md), and the value
is read once, whole.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

HEADER = struct.Struct(">Q")
FANOUT = 32
"""Children a relay serves a level: each server sends at most 31 copies a level (124 at
100K ranks, 4 levels) and a member is at most 3 hops from the store at 16K ranks."""


def parent(rank: int, fanout: int) -> int:
    """Where group rank ``rank`` (> 0) reads the value: 0 is the store."""
    place = 1
    while rank % (place * fanout) == 0:
        place *= fanout
    return rank - rank % (place * fanout)


def children(rank: int, fanout: int, size: int) -> list[int]:
    """The group ranks that read the value from ``rank`` (from the store for 0)."""
    out: list[int] = []
    place = 1
    while place < size and (rank == 0 or rank % (place * fanout) == 0):
        out.extend(c for c in range(rank + place, min(size, rank + fanout * place), place))
        place *= fanout
    return out


def local_address(toward: str) -> str:
    """This process's address on the route to ``toward`` (the job's store): where its
    peers, who reach the store, reach it. A connected UDP socket sends nothing."""
    family = socket.AF_INET6 if ":" in toward else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((toward, 9))
        return str(s.getsockname()[0])


class Relay:
    """Serves ``value`` once to each of ``clients`` connections, on ``host`` only, then
    closes; gives up on children that have not come by ``timeout_s`` (a dead child)."""

    def __init__(self, host: str, value: bytes, clients: int, timeout_s: float) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, 0), family=family, backlog=clients)
        self.address = f"{host} {self.sock.getsockname()[1]}"
        """Where children connect: ``host port``."""
        threading.Thread(
            target=self._serve, args=(value, clients, time.monotonic() + timeout_s), daemon=True, name="ftbench-relay"
        ).start()

    def _serve(self, value: bytes, clients: int, deadline: float) -> None:
        try:
            for _ in range(clients):
                self.sock.settimeout(max(1e-3, deadline - time.monotonic()))
                conn, _ = self.sock.accept()
                with conn:
                    conn.settimeout(max(1e-3, deadline - time.monotonic()))
                    conn.sendall(HEADER.pack(len(value)))
                    conn.sendall(value)
        except OSError:
            return  # the deadline passed: a child that never came (it died) or stopped reading
        finally:
            self.sock.close()


def fetch(address: str, timeout_s: float) -> bytes:
    """The value a :class:`Relay` at ``address`` serves; RuntimeError if it cannot be
    had by ``timeout_s`` (a failure of the exchange, as a store's timeout is)."""
    host, port = address.rsplit(" ", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
            (size,) = HEADER.unpack(_exactly(s, HEADER.size))
            return _exactly(s, size)
    except OSError as err:
        raise RuntimeError(f"relay at {address}: {err}") from err


def _exactly(s: socket.socket, size: int) -> bytes:
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    while got < size:
        n = s.recv_into(view[got:])
        if n == 0:
            raise ConnectionError(f"closed after {got} of {size} bytes")
        got += n
    return bytes(buf)
