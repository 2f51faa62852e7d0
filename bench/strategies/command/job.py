"""A command job's trial: its commands started as written, watched, torn down.

Each command is started without a shell, in a session of its own, with the run's marker
in its environment (so whatever it forks, launched or not, is swept with the trial), the
probe switched on (:func:`bench.probe.environment`) and its output captured
(:mod:`.output`). A ``per_rank`` command is started once per rank of its host with a
launcher's worker environment around ftbench's store. A command runs in its host's
network namespace where the trial has hosts of its own, or in the trial's private
namespace where one confines servers that bind every interface.

The job is over when every command has exited and no rank process is left (a rank the
launcher orphaned still trains); whatever else it left behind is swept and named in
the trial's events (``left_behind``). After the trial, :meth:`CommandJob.translate`
turns what the probe and the output showed into the figures' events.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
from pathlib import Path
from typing import Any

from bench import probe
from bench.jobs.job import Job, Observed
from bench.procs.events import Event, EventWriter
from bench.procs.hygiene import alive, marked_pids, set_pdeathsig
from bench.procs.launcher import LocalLauncher
from bench.procs.store import free_port
from bench.scenario.model import Scenario
from bench.strategies.command.interpreter import interpreter_versions, missing
from bench.strategies.command.output import LINES_SUFFIX, OutputCapture, read_lines
from bench.strategies.command.progress import parse
from bench.strategies.command.translate import translate
from bench.workloads.command import CommandParams, CommandSpec, fixed, program


class CommandJob(Job):
    """The commands of one trial, and what they showed."""

    def start(self) -> None:
        ctx = self.ctx
        s = ctx.scenario
        self.params: CommandParams = s.workload.params
        self.events = EventWriter(ctx.events_dir / "job.jsonl", src="job", pid=os.getpid())
        self.output = OutputCapture(ctx.events_dir, int(self.params.output_limit_mb * 1e6))
        ctx.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.services: list[tuple[str, subprocess.Popen[bytes]]] = []
        """Commands the job needs but is not (``service``): not waited for."""
        self.exits: dict[str, int] = {}
        self._ranks_seen: dict[str, int] = {}
        """A probe's events file -> the rank process it announced."""
        self._port = free_port()
        """``{free_port}``: one free port for the whole trial (a launcher's rendezvous)."""
        self.launcher: LocalLauncher | None = None
        if any(c.per_rank for c in self.params.commands):
            self.launcher = LocalLauncher(
                host=ctx.host,
                start_method="spawn",
                trial_dir=ctx.trial_dir,
                events_dir=ctx.events_dir,
                namespace=ctx.store_namespace,
                address=ctx.store_host,
            )
            self.launcher.start_store()
        names = [c.name or f"cmd{i}" for i, c in enumerate(self.params.commands)]
        for i, c in enumerate(self.params.commands):
            # Each command's output and records under a name of its own.
            name = names[i] if names.count(names[i]) == 1 else f"{names[i]}.{i}"
            if c.per_rank:
                ranks = c.ranks or tuple(range(s.workload.world_size))
                for local, rank in enumerate(ranks):
                    self._start(f"{name}.rank{rank}", c, self._rank_env(c, rank, local, len(ranks)))
            else:
                self._start(name, c, {})

    def _rank_env(self, c: CommandSpec, rank: int, local: int, local_size: int) -> dict[str, str]:
        """What a launcher gives a worker, around ftbench's store (torchrun's own names)."""
        assert self.launcher is not None
        s = self.ctx.scenario
        return {
            "RANK": str(rank),
            "LOCAL_RANK": str(local),
            "GROUP_RANK": str(c.host),
            "WORLD_SIZE": str(s.workload.world_size),
            "LOCAL_WORLD_SIZE": str(local_size),
            "MASTER_ADDR": self.ctx.store_host,
            "MASTER_PORT": str(self.launcher.store_port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCHELASTIC_RESTART_COUNT": "0",
        }

    def _start(self, name: str, c: CommandSpec, extra: dict[str, str]) -> None:
        ctx = self.ctx
        cwd = os.path.join(self._base(), c.cwd)
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it for its workers
        if ctx.ifname:
            env["GLOO_SOCKET_IFNAME"] = ctx.ifname  # gloo listens where the job's hosts are, no wider
        env.update({k: self._fill(v) for k, v in c.env.items()})
        env.update(extra)
        env = probe.environment(ctx.events_dir, env, rank_base=c.rank_base)
        argv = [self._fill(a) for a in c.argv]
        exe = program(argv[0], cwd, c.env) or argv[0]
        namespace = ctx.network.namespace_for(c.host) if ctx.network is not None else ""

        def prepare() -> None:
            set_pdeathsig()
            if namespace:
                from injectors.link.netns import enter

                enter(namespace)

        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [exe, *argv[1:]],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                start_new_session=True,
                preexec_fn=prepare,
            )
        except OSError as err:
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            self.events.emit("command_failed", command=name, error=f"{type(err).__name__}: {err}")
            return
        os.close(out_w)
        os.close(err_w)
        self.output.add(f"{name}.out", out_r)
        self.output.add(f"{name}.err", err_r)
        (self.services if c.service else self.procs).append((name, proc))
        self.events.emit(
            "command_start", command=name, of_pid=proc.pid, host=c.host, argv=argv, cwd=cwd, **_rank_of(extra)
        )

    def _fill(self, text: str) -> str:
        """The placeholders of an argument or environment value, for this trial."""
        ctx = self.ctx
        text = fixed(text).replace("{checkpoint_dir}", str(ctx.checkpoint_dir)).replace("{seed}", str(ctx.seed))
        text = text.replace("{free_port}", str(self._port))
        hosts = getattr(ctx.network, "hosts", None)
        return re.sub(r"\{host(\d+)\}", lambda m: hosts[int(m.group(1))].address if hosts else "127.0.0.1", text)

    def poll(self, timeout_s: float) -> bool:
        if self.ctx.memory_cgroup:
            self._rank_pids()  # each new rank into a memory group of its own, at once
        live = [(n, p) for n, p in self.procs if n not in self.exits]
        if live:
            fds = [os.pidfd_open(p.pid) for _, p in live]
            try:
                select.select(fds, [], [], timeout_s)
            finally:
                for fd in fds:
                    os.close(fd)
            for n, p in live:
                code = p.poll()
                if code is not None:
                    self.exits[n] = code
                    self.events.emit("proc_exit", command=n, of_pid=p.pid, exitcode=code, **_rank_of_name(n))
            if any(n not in self.exits for n, _ in self.procs):
                return False
        else:
            select.select([], [], [], timeout_s)
        return not self._ranks_alive()

    def _ranks_alive(self) -> list[int]:
        """Rank processes still running (the probe announced them; a launcher's orphan
        trains on after its agent is gone)."""
        return [p for p in self._rank_pids() if alive(p)]

    def _rank_pids(self) -> set[int]:
        """Every rank process the probe has announced so far; a new one joins a memory
        group of its own where the trial has one (an ``oom`` fault limits that group)."""
        known = self._ranks_seen
        for path in self.ctx.events_dir.glob("probe-rank*.jsonl"):
            if path.name in known:
                continue
            start = _first_event(path)
            if start is None or start.get("event") != "proc_start":
                continue  # its first line is not written yet: next time
            known[path.name] = pid = int(start["pid"])
            if self.ctx.memory_cgroup:
                from injectors.cgroup import join

                try:
                    join(self.ctx.memory_cgroup, int(start["rank"]), pid)
                except OSError as err:  # it exited already
                    self.events.emit("cgroup_join_failed", of_pid=pid, error=str(err))
        return set(known.values())

    def close(self) -> None:
        ctx = self.ctx
        for name, p in getattr(self, "services", []):
            p.terminate()  # the job is over: its servers go, and their ending is no fault
            try:
                code = p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                code = p.wait(timeout=10)
            self.events.emit("service_stopped", command=name, of_pid=p.pid, exitcode=code)
        keep = ctx.host.infrastructure() | (
            {self.launcher.store_process.pid}
            if self.launcher is not None and self.launcher.store_process and self.launcher.store_process.pid
            else set()
        )
        if hasattr(self, "events"):
            left = sorted(set(marked_pids(ctx.host.run_id)) - keep)
            if left:
                self.events.emit("left_behind", pids=left, commands=[_cmdline(p) for p in left])
        ctx.host.sweep_trial()
        if hasattr(self, "procs"):
            for _, p in self.procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        if getattr(self, "launcher", None) is not None:
            assert self.launcher is not None
            self.launcher.close()
        if hasattr(self, "output"):
            self.output.close()
        if hasattr(self, "events"):
            self.events.close()

    def finished(self) -> bool:
        """Every command exited 0."""
        return bool(self.procs) and all(self.exits.get(n) == 0 for n, _ in self.procs)

    def observe(self, events: list[Event]) -> Observed:
        """The figures' events from what this trial's job showed (:mod:`.translate`),
        and why a fault that never fired did not (the job's own reasons)."""
        lines = [line for path in sorted(self.ctx.events_dir.glob(f"*{LINES_SUFFIX}")) for line in read_lines(path)]
        lines.sort(key=lambda x: x[0])
        observed = translate(events, parse(lines, self.params.progress), finished=self.finished())
        observed.events.extend(self._unfired(events))
        observed.events.sort(key=lambda e: e["t"])
        return observed

    def _unfired(self, events: list[Event]) -> list[Event]:
        """``inject_skipped`` for each fault that neither fired nor was skipped, saying
        what the job did instead: ended first, never showed a step, or (a fault that
        found no process) carries no such ``RANK``."""
        fired = {int(e.get("fault", 0)) for e in events if e["event"] in ("inject", "arm")}
        skipped = {int(e.get("fault", 0)): e for e in events if e["event"] == "inject_skipped"}
        ranks = sorted({int(e["rank"]) for e in events if e["event"] == "proc_start" and e.get("src") == "rank"})
        steps = any(e["event"] == "step_end" for e in events)
        ended = ", ".join(f"{n} exited {code}" for n, code in self.exits.items())
        out: list[Event] = []
        t = max((e["t"] for e in events), default=0)
        for i, f in enumerate(self.ctx.scenario.faults):
            if i in fired:
                continue
            if i in skipped:
                wanted = list(skipped[i].get("ranks", []))
                if wanted and not set(wanted) & set(ranks):
                    why = (
                        f"no process of the job says RANK={','.join(map(str, wanted))} in its environment "
                        f"(the job's ranks: {ranks or 'none'}): a command job's rank r is the process whose "
                        "environment says RANK=r"
                    )
                    out.append({**skipped[i], "t": skipped[i]["t"] + 1, "reason": why})
                continue
            over = bool(self.procs) and len(self.exits) == len(self.procs)
            if not steps:
                why = "the job never showed a step (no torch optimizer stepped, no progress line matched)"
                why = f"the job ended before it showed a step ({ended})" if over else why
            elif over:
                why = f"the job ended before the fault's trigger ({ended})"
            else:
                why = "the fault's trigger was never reached"
            out.append({"t": t, "event": "inject_skipped", "src": "job", "fault": i, "kind": f.kind, "reason": why})
        return out

    def versions(self) -> dict[str, Any]:
        """What the job's own interpreter has: torch, torchft, NVRx."""
        return interpreter_versions(self.ctx.scenario.workload.params, base_of(self.ctx.scenario))

    @classmethod
    def unavailable(cls, scenario: Scenario) -> str | None:
        return missing(scenario.workload.params, base_of(scenario))

    def _base(self) -> str:
        return base_of(self.ctx.scenario)


def base_of(scenario: Scenario) -> str:
    """The folder a command's ``cwd`` is relative to: the scenario file's (the current
    directory for ``ftbench run --job``)."""
    source = scenario.source
    return os.path.dirname(os.path.abspath(source)) if os.path.isfile(source) else os.getcwd()


def _rank_of(extra: dict[str, str]) -> dict[str, int]:
    return {"rank": int(extra["RANK"])} if "RANK" in extra else {}


def _rank_of_name(name: str) -> dict[str, int]:
    _, _, tail = name.rpartition(".rank")
    return {"of_rank": int(tail)} if tail.isdigit() else {}


def _first_event(path: Path) -> Event | None:
    """The first whole event of a probe's file, if it is written yet."""
    import json

    with open(path, "rb") as fh:
        first = fh.readline()
    if not first.endswith(b"\n"):
        return None
    try:
        event: Event = json.loads(first)
    except ValueError:
        return None
    return event


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return ""
