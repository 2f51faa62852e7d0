"""TorchFT's lighthouse in a process of its own, and its log turned into events.

The lighthouse is forked like the ranks, so that it dies with the trial and with the
harness (parent-death signal, run marker) and a control-plane fault can target it
(``proc_start`` with ``src = "lighthouse"`` gives its pid). Its log (Rust ``INFO``:
several lines per step) goes to ``lighthouse.log`` in the trial's event directory; the
quorums it issues are also events (``quorum``: id, participants), stamped when the line
is read from its stderr pipe; a quorum that drops a replica is also the lighthouse's
``detect`` (``how = "quorum_drop"``).
"""

from __future__ import annotations

import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

from bench.procs.events import EventWriter
from bench.procs.hygiene import set_pdeathsig
from bench.procs.launcher import publish

LIGHTHOUSE_KEY = "torchft/lighthouse"
"""Launcher-store key holding the lighthouse's address, read by every replica."""

_QUORUM_LINE = re.compile(r"quorum_id[:=]\s*(\d+)")
_REPLICA_ID = re.compile(r"replica_id:\s*\"([^\"]+)\"")


def main(
    addr_file: str,
    events_dir: str,
    namespace: str,
    bind: str,
    min_replicas: int,
    join_timeout_ms: int,
    quorum_tick_ms: int,
    heartbeat_timeout_ms: int,
) -> None:
    """Body of the lighthouse process: serve on ``bind`` (loopback on one host, the
    address the hosts reach with host agents) until killed, logging to a file.

    It advertises the host name (``http://<hostname>:<port>``); replicas are given
    ``http://<bind>:<port>``, the address it listens on, instead."""
    set_pdeathsig()
    if namespace:
        from injectors.link.netns import enter

        enter(namespace)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.environ["RUST_LOG"] = "info"
    events = EventWriter(Path(events_dir) / f"lighthouse-{os.getpid()}.jsonl", src="lighthouse", pid=os.getpid())
    events.emit("proc_start", role="lighthouse")
    _pipe_stderr(Path(events_dir) / "lighthouse.log", events)
    from torchft._torchft import LighthouseServer

    server = LighthouseServer(
        bind=f"[{bind}]:0" if ":" in bind else f"{bind}:0",
        min_replicas=min_replicas,
        join_timeout_ms=join_timeout_ms,
        quorum_tick_ms=quorum_tick_ms,
        heartbeat_timeout_ms=heartbeat_timeout_ms,
    )
    host = f"[{bind}]" if ":" in bind else bind
    address = f"http://{host}:" + server.address().rsplit(":", 1)[1]
    events.emit(
        "lighthouse_ready",
        address=address,
        advertised=server.address(),
        min_replicas=min_replicas,
        join_timeout_ms=join_timeout_ms,
        quorum_tick_ms=quorum_tick_ms,
        heartbeat_timeout_ms=heartbeat_timeout_ms,
    )
    publish(addr_file, address)
    while True:
        signal.pause()


def _pipe_stderr(log: Path, events: EventWriter) -> None:
    """Send fds 1 and 2 through a pipe to a thread that appends each line to ``log`` and
    turns quorum changes into ``quorum`` events (the Rust side logs to stderr). The
    thread only copies bytes, so the lighthouse never blocks on a full pipe for long."""
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 1)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def pump() -> None:
        last: dict[str, Any] | None = None
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            pending = b""
            while chunk := pipe.read(65536):
                os.write(out, chunk)
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                for line in lines:
                    fields = parse_quorum_line(line.decode(errors="replace"))
                    # The lighthouse answers every step's request with a "Quorum!" line;
                    # only a change of id or membership is a quorum change.
                    if fields is not None and fields != last:
                        events.emit("quorum", **fields)
                        dropped = sorted(set(last["participants"]) - set(fields["participants"])) if last else []
                        if dropped:
                            # The lighthouse noticed first that a replica stopped
                            # beating: a stalled replica fails no collective of the
                            # others, who just wait for the next quorum.
                            events.emit(
                                "detect",
                                how="quorum_drop",
                                dropped=dropped,
                                dropped_ranks=replica_ranks(dropped),
                                gen=fields["gen"],
                            )
                        last = fields

    threading.Thread(target=pump, name="lighthouse-log", daemon=True).start()


def replica_ranks(replica_ids: list[str]) -> list[int]:
    """ftbench's ranks of torchft replica ids (``replica_<rank>``, as replica.py names them)."""
    return sorted(int(r.rsplit("_", 1)[1]) for r in replica_ids if r.rsplit("_", 1)[-1].isdigit())


def parse_quorum_line(line: str) -> dict[str, Any] | None:
    """``{"gen": id, "participants": [...]}`` from the lighthouse's "Quorum!" line, else None."""
    if "Quorum!" not in line:
        return None
    match = _QUORUM_LINE.search(line)
    if match is None:
        return None
    members = sorted({m.split(":")[0] for m in _REPLICA_ID.findall(line)})
    return {"gen": int(match.group(1)), "participants": members, "world_size": len(members)}
