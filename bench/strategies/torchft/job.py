"""torchft's harness side: the lighthouse, supervised replicas, new incarnations.

The supervisor acts as the scheduler and as TorchFT's punisher does in its own tests: it
reaps replica processes, records their exits (``detect`` with ``how = "exit"``) and
starts a new incarnation of a replica that died ``restart_delay_s`` after its death. The
new incarnation registers with the lighthouse under a new id, waits for a quorum and
heals from a live peer over HTTP before it participates again. Nobody is restarted once
no replica is left (there is no peer to heal from: TorchFT would start over from step
0) or once one has finished training (the job is over; see :data:`FINISH_GRACE_S`).

Phases of a recovery (between the first detection and the survivors' first commit
without the victim): ``lighthouse`` (until the lighthouse issues the new quorum: the
heartbeat or join timeout dominates it), ``reconfigure`` (until every member of that
quorum has it in hand: process group rebuilt, a healing member's state fetched), then
``catchup`` (the step itself and its commit). The replacement's own return is the
figures ``ttfs_s`` (time to full strength) and ``restore_s``/``restore_bytes``.
"""

from __future__ import annotations

import gzip
import json
import shutil
import time
from pathlib import Path
from typing import Any

from bench.jobs.supervisor import SupervisedJob
from bench.procs.launcher import RankProcess
from bench.rank.entry import EXIT_OK
from bench.scenario.model import Scenario
from bench.strategies.torchft import TorchFTParams, group_key, group_size, lighthouse
from bench.strategies.torchft.version import ddp_workaround_needed, native_unsupported, torchft_version

FINISH_GRACE_S = 2.0
"""Once a replica has finished training, the others get this long to finish too (members
of the last quorum end within a step of each other); a replacement still waiting for
its first quorum then is stopped: it would otherwise wait for the finished replicas'
heartbeats to expire and then train alone from step 0, as nothing tells it the job is
over (a scheduler ends the job in real deployments)."""


class TorchFTJob(SupervisedJob):
    """Lighthouse + the replica groups' processes (one per group, or the group size under
    hsdp), a group restarted after a death."""

    ranks_first = False  # a replica group's incarnation is in the store before its ranks start

    @classmethod
    def unavailable(cls, scenario: Scenario) -> str | None:
        if torchft_version() is None:
            return "torchft is not importable here: pip install 'ftbench[torchft]'"
        params: TorchFTParams = scenario.recovery.params
        if params.process_group == "native":
            # Asked here, in the environment that runs the point (launch.env), not at load.
            from bench.procs.machine import resolve_backend

            try:
                backend = resolve_backend(scenario.workload.backend, scenario.workload.world_size)
            except RuntimeError:
                return None  # the runner says why this backend cannot run
            why = native_unsupported(backend)
            if why:
                return f"recovery.torchft.process_group = native: {why}"
        return None

    @property
    def params(self) -> TorchFTParams:
        params: TorchFTParams = self.ctx.scenario.recovery.params
        return params

    def start_services(self) -> None:
        self.lighthouse = self._start_lighthouse()
        self.lighthouse_gone = False
        self.store.set(lighthouse.LIGHTHOUSE_KEY, self.lighthouse_addr)
        self.stopped: set[int] = set()
        """ids of the rank processes the job stopped itself."""
        self.group_size = group_size(self.ctx.scenario.workload)

    def start_rank(self, rank: int, role: str) -> RankProcess:
        if self.group_size > 1:  # the group's ranks meet under its incarnation
            self.store.set(group_key(rank // self.group_size), str(self.incarnations[rank]))
        return super().start_rank(rank, role)

    def on_exit(self, r: RankProcess) -> None:
        """A replica group of several ranks (hsdp) is lost as a whole, as under torchrun:
        when one of its ranks fails the others still alive are stopped, and the group
        comes back whole when the first of its replacements is due."""
        super().on_exit(r)
        if self.group_size == 1 or self.stopped_by_us(r) or r.exitcode == EXIT_OK or self.finished_at is not None:
            return
        group = r.rank // self.group_size
        members = range(group * self.group_size, (group + 1) * self.group_size)
        for peer in self.launcher.running():
            alive = peer.process is None or peer.process.is_alive()
            if peer.rank in members and alive and id(peer) not in self.stopped:
                self.stopped.add(id(peer))
                self.supervisor.emit("stop", of_rank=peer.rank, reason=f"its replica group lost rank {r.rank}")
                self.launcher.kill_rank(peer)
        due = [self.replacements[m] for m in members if m in self.replacements]
        if due:
            for m in members:
                self.replacements[m] = min(due)

    def stopped_by_us(self, r: RankProcess) -> bool:
        return id(r) in self.stopped

    def _start_lighthouse(self, timeout_s: float = 60.0) -> Any:
        p = self.params
        addr_file = self.ctx.events_dir / "lighthouse.addr"
        addr_file.unlink(missing_ok=True)
        process = self.launcher.ctx.Process(
            target=lighthouse.main,
            name="ftbench-lighthouse",
            daemon=False,
            args=(
                str(addr_file),
                str(self.ctx.events_dir),
                self.ctx.store_namespace,
                self.ctx.store_host,
                p.min_replicas,
                p.join_timeout_ms,
                p.quorum_tick_ms,
                p.heartbeat_timeout_ms,
            ),
        )
        process.start()
        self.lighthouse_addr = self.launcher.await_file(
            process, addr_file, f"the lighthouse (see {self.ctx.events_dir / 'lighthouse.log.gz'})", timeout_s
        )
        return process

    def replacement_delay(self, rank: int) -> float | None:
        p = self.params
        return p.restart_delay_s if p.restart and self.incarnations[rank] < p.max_restarts else None

    def on_tick(self) -> None:
        if self.lighthouse.exitcode is not None and not self.lighthouse_gone:
            # Not restarted: replicas fail their next quorum, and are restarted themselves.
            self.lighthouse_gone = True
            self.supervisor.emit("proc_exit", of="lighthouse", exitcode=self.lighthouse.exitcode)
            self.supervisor.emit("detect", how="exit", of="lighthouse", exitcode=self.lighthouse.exitcode)
        if self.finished_at is not None and time.monotonic() - self.finished_at > FINISH_GRACE_S:
            for r in self.launcher.running():
                if id(r) not in self.stopped:
                    self.stopped.add(id(r))
                    self.supervisor.emit("stop", of_rank=r.rank, reason="training finished without it")
                    self.launcher.kill_rank(r)

    def over(self) -> bool:
        return not self.launcher.running() and not self.replacements

    def close(self) -> None:
        super().close()  # sweeps every marked process of the trial, the lighthouse included
        process = getattr(self, "lighthouse", None)
        if process is not None:
            process.join(timeout=10)
            if process.exitcode is None:
                process.kill()
                process.join(timeout=10)
        _compress_logs(self.ctx.events_dir)

    def versions(self) -> dict[str, Any]:
        version = torchft_version()
        return {
            "torchft": version[1] if version else None,
            "torchft_distribution": version[0] if version else None,
            "torchft_ddp_workaround": ddp_workaround_needed(version, self.params.ddp_workaround) if version else None,
            "torchft_process_group": self.params.process_group,
            **observed_pg(self.ctx.events_dir),
        }


def observed_pg(events_dir: Path) -> dict[str, Any]:
    """The process group torchft's Managers held in a trial, as the replicas recorded it
    (``tf_pg`` events): ``torchft_pg_path`` (``native`` or ``torchft``; several joined by
    ``+`` if replicas differed; None if no replica got that far), ``torchft_pg_class``,
    ``torchft_pg_handle`` and ``torchft_reconfigure_options`` (``torch``, ``shim`` or
    ``none``)."""
    seen: dict[str, set[str]] = {field: set() for field in _OBSERVED}
    for path in sorted(events_dir.glob("rank*.jsonl")):
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            if '"tf_pg"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a torn line
            if event.get("event") == "tf_pg":
                for key, values in seen.items():
                    if isinstance(event.get(key), str):
                        values.add(event[key])
    return {name: "+".join(sorted(seen[field])) or None for field, name in _OBSERVED.items()}


_OBSERVED = {
    "path": "torchft_pg_path",
    "pg_class": "torchft_pg_class",
    "handle": "torchft_pg_handle",
    "reconfigure_options": "torchft_reconfigure_options",
}
"""Fields of a ``tf_pg`` event -> their keys among the versions."""


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
