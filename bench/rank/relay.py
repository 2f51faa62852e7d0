"""A tree of relays over the members: how what every member must learn leaves the store
O(log N) or O(N log N) times instead of N times.

Two things travel down it. torch-reconfigure's handles: every member needs every peer's
(``dist._reconfigure`` takes them all, in rank order), N handles to each of N members,
O(N²) bytes whatever the protocol; read from the job's store by every member, all of
them leave one process and one socket (29.7 s at 1,024 ranks with one ``get`` per key;
docs/scale.md). And a generation's abort, which every member watches: from the store,
each watcher a connection of its own (two connections a member, which stopped
``ftbench scale`` at 16,384 members on 20,000 descriptors).

The tree: the members whose group rank has a single nonzero digit in base ``fanout``
(the root's children), and group rank 0, read the store; every other member reads from
its parent, its group rank with the lowest nonzero base-``fanout`` digit cleared, which
serves it from a listening socket of its own: :class:`Relay` for a value read once,
:class:`Herald` for the aborts of generations. Each server, the store included, sends at
most ``(fanout - 1) x ceil(log_fanout N)`` copies, and a member waits for at most
``ceil(log_fanout N)`` hops. Up to ``fanout`` members nobody relays: every member reads
the store, as before.

A relay is a plain socket (an 8-byte length, then the value) rather than a ``TCPStore``
server: a ``TCPStore`` client looks its server's address up in reverse before it
connects, which can wait seconds on a resolver (docs/scale.md), and each value is read
once, whole.
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
HELLO_S = 5.0
"""How long a herald waits for a child that connected to name its generation (it does
so at once; a connection that does not is not a child)."""


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


class Herald:
    """A member's relay of generations' aborts to its children in the tree: a child
    connects and names the generation it watches (8 bytes); once this member knows that
    generation's abort (:meth:`announce`) it sends it to each child, and at once to one
    that comes later. One listening socket and one thread for the life of the member's
    process; a child's connection is held until its generation's abort (or the process's
    end: a generation that ends in a growth has none)."""

    def __init__(self, host: str) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, 0), family=family, backlog=128)
        self.address = f"{host} {self.sock.getsockname()[1]}"
        self.lock = threading.Lock()
        self.waiting: dict[int, list[socket.socket]] = {}
        self.said: dict[int, bytes] = {}
        threading.Thread(target=self._serve, daemon=True, name="ftbench-herald").start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                conn.settimeout(HELLO_S)
                (gen,) = HEADER.unpack(_exactly(conn, HEADER.size))
            except OSError:
                conn.close()
                continue
            with self.lock:
                said = self.said.get(gen)
                if said is None:
                    self.waiting.setdefault(gen, []).append(conn)
                    continue
            _tell(conn, said)

    def announce(self, gen: int, message: bytes) -> None:
        """Generation ``gen``'s abort, to its children (once)."""
        with self.lock:
            if gen in self.said:
                return
            self.said[gen] = message
            children = self.waiting.pop(gen, [])
        for conn in children:
            _tell(conn, message)


def _tell(conn: socket.socket, message: bytes) -> None:
    try:
        conn.settimeout(HELLO_S)
        conn.sendall(HEADER.pack(len(message)) + message)
    except OSError:
        pass  # the child is gone
    finally:
        conn.close()


def hear(address: str, gen: int, timeout_s: float) -> bytes | None:
    """Generation ``gen``'s abort from the :class:`Herald` at ``address``, when it comes;
    None if the herald went away first (its member died) or at ``timeout_s``."""
    host, port = address.rsplit(" ", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
            s.sendall(HEADER.pack(gen))
            (size,) = HEADER.unpack(_exactly(s, HEADER.size))
            return _exactly(s, size)
    except OSError:
        return None


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
