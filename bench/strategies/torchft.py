"""``torchft``: per-step fault tolerance with the real ``torchft`` package (harness side).

A trial is a lighthouse and ``workload.world_size`` replica groups of one process each
(launch rank ``r`` = replica group ``r``, see :mod:`bench.ft_replica`). The launcher's
monitor acts as the scheduler and as TorchFT's punisher does in its own tests: it reaps
replica processes, records their exits (``detect`` with ``how = "exit"``) and starts a
new incarnation of a replica that died ``restart_delay_s`` after its death. The new
incarnation registers with the lighthouse under a new id, waits for a quorum and heals
from a live peer over HTTP before it participates again. Nobody is restarted once no
replica is left (there is no peer to heal from: TorchFT would start over from step 0)
or once one has finished training (the job is over; see :data:`FINISH_GRACE_S`).

The lighthouse runs in a process of its own, forked like the ranks, so that it dies with
the trial and with the harness (parent-death signal, run marker) and a control-plane
fault can target it (``proc_start`` with ``src = "lighthouse"`` gives its pid). Its log
(Rust ``INFO``: several lines per step) goes to ``lighthouse.log`` in the trial's event
directory, as each replica's goes to ``replica<r>-<pid>.log`` (all gzipped when the trial
ends); the quorums it issues are also events (``quorum``: id, participants), stamped
when the line is read from its stderr pipe; a quorum that drops a replica is also the
lighthouse's ``detect`` (``how = "quorum_drop"``).

Phases of a recovery (between the first detection and the survivors' first commit
without the victim): ``lighthouse`` (until the lighthouse issues the new quorum: the
heartbeat or join timeout dominates it), ``reconfigure`` (until every member of that
quorum has it in hand: process group rebuilt, a healing member's state fetched), then
``catchup`` (the step itself and its commit). The replacement's own return is the
figures ``ttfs_s`` (time to full strength) and ``restore_s``/``restore_bytes``.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import importlib.util
import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

from bench.events import EventWriter
from bench.launch import LocalLauncher, publish
from bench.procs import set_pdeathsig
from bench.rank import RankSpec, main as rank_process_main
from bench.strategies.base import Job

LIGHTHOUSE_KEY = "torchft/lighthouse"
"""Launcher-store key holding the lighthouse's address, read by every replica."""

FINISH_GRACE_S = 2.0
"""Once a replica has finished training, the others get this long to finish too (members
of the last quorum end within a step of each other); a replacement still waiting for
its first quorum then is stopped: it would otherwise wait for the finished replicas'
heartbeats to expire and then train alone from step 0, as nothing tells it the job is
over (a scheduler ends the job in real deployments)."""

#: The first torchft-nightly whose DDP returns a failed bucket unchanged (FACTS.md).
FIXED_NIGHTLY = (2026, 10, 26)
#: The last release known to kill survivors from its DDP comm hook.
BROKEN_RELEASE = (0, 2, 0)

_QUORUM_LINE = re.compile(r"quorum_id[:=]\s*(\d+)")
_REPLICA_ID = re.compile(r"replica_id:\s*\"([^\"]+)\"")


def torchft_version() -> tuple[str, str] | None:
    """(distribution, version) of the torchft that ``import torchft`` would load, or None.

    Looked up next to the importable package, not by distribution name: both
    ``torchft`` and ``torchft-nightly`` provide the same package, and a ``PYTHONPATH``
    entry may shadow the one installed in the environment.
    """
    spec = importlib.util.find_spec("torchft")
    if spec is None or spec.origin is None:
        return None
    root = str(Path(spec.origin).parent.parent)
    for dist in importlib.metadata.distributions(path=[root]):
        name = dist.metadata["Name"] or ""
        if name.lower().replace("_", "-") in ("torchft", "torchft-nightly"):
            return name, dist.version
    return "unknown", "unknown"


def ddp_workaround_needed(version: tuple[str, str] | None, mode: str) -> bool:
    """Whether to replace TorchFT's DDP comm hook (see :func:`bench.ft_replica.ddp_class`).

    ``auto`` applies it to releases up to 0.2.0 and nightlies before the fix, and to
    versions it cannot read; later versions run their own hook untouched.
    """
    if mode in ("on", "off"):
        return mode == "on"
    if version is None:
        return True
    name, text = version
    parts = tuple(int(p) for p in re.findall(r"\d+", text)[:3])
    if len(parts) < 3:
        return True
    return parts < FIXED_NIGHTLY if "nightly" in name.lower() else parts <= BROKEN_RELEASE


def replica_log_path(events_dir: str | Path, rank: int, pid: int) -> str:
    """Where a replica's stdout/stderr (TorchFT's Rust and Python logs) go."""
    return str(Path(events_dir) / f"replica{rank}-{pid}.log")


def lighthouse_main(addr_file: str, events_dir: str, min_replicas: int, join_timeout_ms: int,
                    quorum_tick_ms: int, heartbeat_timeout_ms: int) -> None:
    """Body of the lighthouse process: serve until killed, logging to a file."""
    set_pdeathsig()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.environ["RUST_LOG"] = "info"
    events = EventWriter(Path(events_dir) / f"lighthouse-{os.getpid()}.jsonl", src="lighthouse", pid=os.getpid())
    events.emit("proc_start", role="lighthouse")
    _pipe_stderr(Path(events_dir) / "lighthouse.log", events)
    from torchft._torchft import LighthouseServer

    server = LighthouseServer(bind="[::]:0", min_replicas=min_replicas, join_timeout_ms=join_timeout_ms,
                              quorum_tick_ms=quorum_tick_ms, heartbeat_timeout_ms=heartbeat_timeout_ms)
    events.emit("lighthouse_ready", address=server.address(), min_replicas=min_replicas,
                join_timeout_ms=join_timeout_ms, quorum_tick_ms=quorum_tick_ms,
                heartbeat_timeout_ms=heartbeat_timeout_ms)
    publish(addr_file, server.address())
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
                            events.emit("detect", how="quorum_drop", dropped=dropped, gen=fields["gen"])
                        last = fields

    threading.Thread(target=pump, name="lighthouse-log", daemon=True).start()


def parse_quorum_line(line: str) -> dict[str, Any] | None:
    """``{"gen": id, "participants": [...]}`` from the lighthouse's "Quorum!" line, else None."""
    if "Quorum!" not in line:
        return None
    match = _QUORUM_LINE.search(line)
    if match is None:
        return None
    members = sorted({m.split(":")[0] for m in _REPLICA_ID.findall(line)})
    return {"gen": int(match.group(1)), "participants": members, "world_size": len(members)}


class TorchFT(Job):
    """Lighthouse + one process per replica group, restarted after a death."""

    phases = (("lighthouse", "quorum"), ("reconfigure", "reconfigured"))


    @classmethod
    def unavailable(cls, scenario: Any) -> str | None:
        if torchft_version() is None:
            return "torchft is not importable here: pip install 'ftbench[torchft]'"
        return None

    def start(self) -> None:
        ctx = self.ctx
        scenario = ctx.point.scenario
        self.params = scenario.recovery.params
        self.version = torchft_version()
        assert self.version is not None, "the runner skips torchft points where torchft is missing"
        self.workaround = ddp_workaround_needed(self.version, self.params.ddp_workaround)
        self.agent = EventWriter(ctx.events_dir / "agent.jsonl", src="agent", pid=os.getpid())
        self.launcher = LocalLauncher(host=ctx.host, start_method=scenario.launch.start_method,
                                      trial_dir=ctx.trial_dir, events_dir=ctx.events_dir)
        self.launcher.start_store()
        self.store = self.launcher.store_client()
        self.lighthouse = self._start_lighthouse()
        self.lighthouse_gone = False
        self.store.set(LIGHTHOUSE_KEY, self.lighthouse_addr)
        self.members = tuple(range(scenario.workload.world_size))
        self.restarts: dict[int, int] = dict.fromkeys(self.members, 0)
        self.pending: dict[int, float] = {}
        """rank -> monotonic time at which its next incarnation is due."""
        self.stopped: set[int] = set()
        self.finished_at: float | None = None
        """When a replica completed training: the job is ending, nobody is restarted."""
        for rank in self.members:
            self._start_replica(rank, "initial")

    def _start_lighthouse(self, timeout_s: float = 60.0) -> Any:
        p = self.params
        addr_file = self.ctx.events_dir / "lighthouse.addr"
        addr_file.unlink(missing_ok=True)
        process = self.launcher.ctx.Process(
            target=lighthouse_main, name="ftbench-lighthouse", daemon=False,
            args=(str(addr_file), str(self.ctx.events_dir), p.min_replicas, p.join_timeout_ms, p.quorum_tick_ms,
                  p.heartbeat_timeout_ms),
        )
        process.start()
        self.lighthouse_addr = self.launcher.await_file(
            process, addr_file, f"the lighthouse (see {self.ctx.events_dir / 'lighthouse.log.gz'})", timeout_s)
        return process

    def _start_replica(self, rank: int, role: str) -> None:
        ctx = self.ctx
        scenario = ctx.point.scenario
        spec = RankSpec(
            rank=rank, members=self.members, store_port=self.launcher.store_port, events_dir=str(ctx.events_dir),
            entry="bench.ft_replica:replica_main", workload=scenario.workload, recovery=scenario.recovery,
            backend=ctx.backend, seed=ctx.seed, wait_s=ctx.deadline_s, role=role,
        )
        self.launcher.start_rank(rank, rank_process_main, spec)

    def poll(self, timeout_s: float) -> bool:
        now = time.monotonic()
        for rank, due in sorted(self.pending.items()):
            if due <= now:
                del self.pending[rank]
                if self.finished_at is None and self.launcher.running():
                    self.restarts[rank] += 1
                    self.agent.emit("restart", of_rank=rank, incarnation=self.restarts[rank])
                    self._start_replica(rank, "replacement")
        if self.pending:
            timeout_s = max(0.0, min(timeout_s, min(self.pending.values()) - now))
        for r in self.launcher.wait(timeout_s):
            code = r.exitcode
            self.agent.emit("proc_exit", of_rank=r.rank, exitcode=code)
            if code == 0:
                self.finished_at = self.finished_at or time.monotonic()
            elif self.finished_at is None:
                self.agent.emit("detect", how="exit", of_rank=r.rank, exitcode=code)
                if self.params.restart and self.restarts[r.rank] < self.params.max_restarts:
                    self.pending[r.rank] = time.monotonic() + self.params.restart_delay_s
        if self.lighthouse.exitcode is not None and not self.lighthouse_gone:
            # Not restarted: replicas fail their next quorum, and are restarted themselves.
            self.lighthouse_gone = True
            self.agent.emit("proc_exit", of="lighthouse", exitcode=self.lighthouse.exitcode)
            self.agent.emit("detect", how="exit", of="lighthouse", exitcode=self.lighthouse.exitcode)
        if self.finished_at is not None:
            self.pending.clear()
            if time.monotonic() - self.finished_at > FINISH_GRACE_S:
                for r in self.launcher.running():
                    if r.process.pid not in self.stopped:
                        self.stopped.add(r.process.pid)
                        self.agent.emit("stop", of_rank=r.rank, reason="training finished without it")
                        r.process.kill()
        return not self.launcher.running() and not self.pending

    def close(self) -> None:
        if hasattr(self, "launcher"):
            self.launcher.close()  # sweeps every marked process of the trial, the lighthouse included
        lighthouse = getattr(self, "lighthouse", None)
        if lighthouse is not None:
            lighthouse.join(timeout=10)
            if lighthouse.exitcode is None:
                lighthouse.kill()
                lighthouse.join(timeout=10)
        _compress_logs(self.ctx.events_dir)
        if hasattr(self, "agent"):
            self.agent.close()

    def versions(self) -> dict[str, Any]:
        version = getattr(self, "version", None) or torchft_version()
        mode = getattr(self.ctx.point.scenario.recovery.params, "ddp_workaround", "auto")
        return {
            "torchft": version[1] if version else None,
            "torchft_distribution": version[0] if version else None,
            "torchft_ddp_workaround": ddp_workaround_needed(version, mode) if version else None,
        }


def _compress_logs(directory: Path) -> None:
    """Gzip the trial's TorchFT logs (this strategy's files only: the lighthouse's and
    the replicas') once every writer is dead. The Rust side writes several lines per
    step and process (~3 MB for 400 steps of 3 replicas); they compress about 35:1."""
    for log in sorted([directory / "lighthouse.log", *directory.glob("replica*.log")]):
        if not log.exists():
            continue
        try:
            with open(log, "rb") as src, gzip.open(log.with_name(log.name + ".gz"), "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst)
            log.unlink()
        except OSError:
            continue  # a log left uncompressed is no loss
