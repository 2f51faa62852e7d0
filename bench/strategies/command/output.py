"""What a command job prints, kept per trial with the moment each line arrived.

One thread per trial reads every stream of the job's commands as it comes (so a job is
never blocked on a full pipe, however much it prints), splits it into lines (``\\n`` and
the ``\\r`` of progress bars), stamps each line with ``time.monotonic_ns()`` on arrival and
appends it to ``<name>.lines`` in the trial's events folder: ``T<TAB>STREAM<TAB>TEXT``.
Past ``limit_bytes`` per stream, lines are counted, not kept. The stamps are when the
harness read a line, after the job wrote it (scheduling, and the job's own buffering:
Python buffers a pipe unless told not to), so they place lines on the timeline; figures
never come from them.
"""

from __future__ import annotations

import os
import selectors
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

LINES_SUFFIX = ".lines"
MAX_LINE = 4096
"""Characters of one line kept (the rest of a longer line is cut)."""


@dataclass
class Stream:
    name: str
    """``<command>.out`` or ``<command>.err``."""
    fd: int
    out: int
    """Descriptor of the ``.lines`` file."""
    limit: int
    kept: int = 0
    dropped: int = 0
    partial: bytes = b""
    kind: str = field(init=False)

    def __post_init__(self) -> None:
        self.kind = self.name.rsplit(".", 1)[-1]


class OutputCapture:
    """Reads the job's pipes on a thread of its own until :meth:`close`."""

    def __init__(self, directory: Path, limit_bytes: int) -> None:
        self.directory = directory
        self.limit = limit_bytes
        self.selector = selectors.DefaultSelector()
        self.streams: dict[int, Stream] = {}
        self._lock = threading.Lock()
        self._closing = False
        self._wake_r, self._wake_w = os.pipe()
        self.selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="ftbench-output", daemon=True)
        self._thread.start()

    def add(self, name: str, fd: int) -> None:
        """Follow ``fd`` (the read end of a pipe, now this object's) as stream ``name``."""
        os.set_blocking(fd, False)
        path = self.directory / f"{name.rsplit('.', 1)[0]}{LINES_SUFFIX}"
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        with self._lock:
            self.streams[fd] = Stream(name=name, fd=fd, out=out, limit=self.limit)
            self.selector.register(fd, selectors.EVENT_READ)
        os.write(self._wake_w, b"x")

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self.streams and self._closing:
                    return
            for key, _ in self.selector.select(timeout=0.5):
                if key.fd == self._wake_r:
                    os.read(self._wake_r, 4096)
                    continue
                self._read(self.streams[key.fd])

    def _read(self, s: Stream) -> None:
        try:
            chunk = os.read(s.fd, 1 << 16)
        except BlockingIOError:
            return
        now = time.monotonic_ns()
        if not chunk:
            if s.partial:
                self._keep(s, now, s.partial)
            self._drop(s)
            return
        data = (s.partial + chunk).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, s.partial = data.split(b"\n")
        if len(s.partial) > MAX_LINE:
            lines.append(s.partial)
            s.partial = b""
        for line in lines:
            if line:
                self._keep(s, now, line)

    def _keep(self, s: Stream, t: int, line: bytes) -> None:
        if s.kept >= s.limit:
            s.dropped += 1
            return
        text = line[:MAX_LINE].decode(errors="replace").replace("\t", " ")
        record = f"{t}\t{s.kind}\t{text}\n".encode()
        s.kept += len(record)
        os.write(s.out, record)

    def _drop(self, s: Stream) -> None:
        with self._lock:
            self.selector.unregister(s.fd)
            del self.streams[s.fd]
        if s.dropped:
            os.write(s.out, f"{time.monotonic_ns()}\t{s.kind}\t[ftbench: {s.dropped} more lines not kept]\n".encode())
        os.close(s.fd)
        os.close(s.out)

    def close(self, timeout_s: float = 5.0) -> None:
        """Read what is left (the writers are gone), then stop; streams still open
        after ``timeout_s`` (a grandchild holding a pipe) are closed unread."""
        self._closing = True
        os.write(self._wake_w, b"x")
        self._thread.join(timeout_s)
        with self._lock:
            left = list(self.streams.values())
        for s in left:
            self._drop(s)
        self._thread.join(1.0)
        self.selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)


def read_lines(path: Path) -> list[tuple[int, str, str]]:
    """``(t, stream, text)`` of a ``.lines`` file."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                t, _, rest = line.rstrip("\n").partition("\t")
                stream, _, text = rest.partition("\t")
                if t.isdigit():
                    out.append((int(t), stream, text))
    except FileNotFoundError:
        pass
    return out
