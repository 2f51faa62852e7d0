"""The local Slurm cluster as an object: its names and paths, its lifetime (start, attach,
close), its clients, losing a node, and its processes (tools/slurm/localslurm.py, the
command line, says why it is built the way it is). Standard library only."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

from slurmconf import (
    CONTROLLER,
    CONTROLLER_ADDRESS,
    FINAL_STATES,
    NETNS_DIR,
    NETNS_PREFIX,
    PARTITION,
    START_DEADLINE_S,
    STATE_FILE,
    STOP_DEADLINE_S,
    SUBNET,
    TEST_TIMERS,
    SlurmUnavailable,
)
from slurmprocs import alive, leftover_namespaces, orphan_zombies, wait_until
from slurmstart import StartUp


class LocalSlurm(StartUp):
    """A Slurm cluster of ``nodes`` nodes and a controller, each host in namespaces of its own.

    ``with LocalSlurm(workdir, nodes=2) as slurm:`` starts it and waits until every node is
    idle; leaving the block cancels every job, stops the daemons, kills whatever else still
    runs in the cluster's namespaces and deletes them. :meth:`start` and :meth:`close` do
    the same outside a block; :meth:`attach` takes over a cluster that ``up`` left running.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        nodes: int = 1,
        cpus: int = 8,
        timers: Mapping[str, str] | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        if not 1 <= nodes <= 200:
            raise ValueError(f"nodes={nodes}: expected 1..200")
        self.workdir: Path = Path(workdir).resolve()
        self.nodes: tuple[str, ...] = tuple(f"n{i}" for i in range(nodes))
        self.cpus: int = cpus
        self.settings: dict[str, str] = {**TEST_TIMERS, **(timers or {}), **(settings or {})}
        """slurm.conf keys over the base configuration: the timers, and anything else a
        measurement varies (``JobRequeue``...). Written as given."""
        self.tag: str = uuid.uuid4().hex[:8]
        self.conf: Path = self.workdir / "etc" / "slurm.conf"
        self.log_dir: Path = self.workdir / "log"
        self.job_dir: Path = self.workdir / "jobs"
        self.munge_socket: Path = self.workdir / "munge" / "munge.socket"
        self.env: dict[str, str] = {"SLURM_CONF": str(self.conf)}
        """Environment for Slurm clients (merged over ``os.environ``); run them via :meth:`run`."""
        self.holders: dict[str, int] = {}
        """Host (``ctl``, ``n0`` ...) -> pid of the process that holds its UTS and mount namespaces."""
        self.daemons: dict[str, int] = {}
        """``munged``, ``slurmctld``, ``slurmd-n0`` ... -> pid (each runs in the foreground)."""
        self.lost: dict[str, float] = {}
        """Node -> CLOCK_MONOTONIC when :meth:`lose_node` took it away."""
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._ns_idents: dict[str, tuple[int, int]] = {}
        self._bin: dict[str, str] = {}

    # -- names and paths ---------------------------------------------------------------

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host of the cluster: the controller first, then the nodes."""
        return (CONTROLLER, *self.nodes)

    def netns(self, role: str) -> str:
        """The network namespace of ``role`` (a host, or ``hub`` for the bridge)."""
        return f"{NETNS_PREFIX}{self.tag}-{role}"

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every network namespace of the cluster (hub first: it is created first)."""
        return tuple(self.netns(r) for r in ("hub", *self.hosts))

    @property
    def namespace(self) -> str:
        """The controller's network namespace (where clients run)."""
        return self.netns(CONTROLLER)

    @property
    def netns_path(self) -> Path:
        """The bind mount that names the controller's network namespace."""
        return NETNS_DIR / self.namespace

    def address(self, host: str) -> str:
        """The IPv4 address of ``host`` on the cluster's bridge."""
        return CONTROLLER_ADDRESS if host == CONTROLLER else f"{SUBNET}.{self.nodes.index(host) + 1}"

    def port(self, host: str) -> str:
        """The bridge end of ``host``'s veth (in the hub namespace): down means unplugged."""
        return f"ftsp-{host}"

    def log(self, daemon: str) -> Path:
        """The log file of ``daemon`` (``munged``, ``slurmctld``, ``slurmd`` (the first
        node's) or ``slurmd-NODE``)."""
        if daemon == "slurmd":
            daemon = f"slurmd-{self.nodes[0]}"
        return self.log_dir / f"{daemon}.log"

    def job_output_path(self, job_id: int) -> Path:
        """Where :meth:`sbatch` sends a job's stdout and stderr."""
        return self.job_dir / f"{job_id}.out"

    @property
    def daemon_pids(self) -> dict[str, int]:
        """Pids of the daemons started so far, by name; a test checks them after exit."""
        return dict(self.daemons)

    # -- context manager and lifetime --------------------------------------------------

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Tear everything down; complain about survivors only if no other error is in flight."""
        problems = self.close()
        if problems and exc is None:
            raise RuntimeError("LocalSlurm teardown left things behind: " + "; ".join(problems))

    def start(self) -> LocalSlurm:
        """Build the hosts, start munged, slurmctld and one slurmd per node, and wait (60 s in
        all) until every node is idle; on any failure, tear down what was built and raise."""
        self._check_prerequisites()
        deadline = time.monotonic() + START_DEADLINE_S
        try:
            for d in (self.workdir / "etc", self.log_dir, self.job_dir, self.workdir / "state" / "ctld"):
                d.mkdir(parents=True, exist_ok=True)
            for node in self.nodes:
                (self.workdir / "state" / f"slurmd-{node}").mkdir(parents=True, exist_ok=True)
            self._write_hosts()
            self._save()  # before anything exists: `down` can then undo a start killed half-way
            self._create_network()
            for host in self.hosts:
                self._start_holder(host, deadline)
            self._save()
            self._start_munged(deadline)
            self._write_config()
            self._start_slurmctld(deadline)
            for node in self.nodes:
                self._spawn(f"slurmd-{node}", node, ["slurmd", "-D", "-N", node, "-f", str(self.conf)])
            self._save()
            self._await("slurmd", self._all_idle, deadline, f"to bring nodes {','.join(self.nodes)} to idle")
        except BaseException:
            self.close()
            raise
        return self

    @classmethod
    def attach(cls, workdir: Path) -> LocalSlurm:
        """The cluster that ``up`` started in ``workdir`` (from its cluster.json)."""
        path = Path(workdir).resolve() / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            raise SlurmUnavailable(f"no cluster in {workdir}: {path} does not exist (start one with `up`)") from None
        slurm = cls(Path(workdir), nodes=int(state["nodes"]), cpus=int(state["cpus"]), settings=state["settings"])
        slurm.tag = str(state["tag"])
        slurm.holders = {str(k): int(v) for k, v in state["holders"].items()}
        slurm.daemons = {str(k): int(v) for k, v in state["daemons"].items()}
        slurm.lost = {str(k): float(v) for k, v in state.get("lost", {}).items()}
        slurm._ns_idents = {str(k): (int(v[0]), int(v[1])) for k, v in state["netns"].items()}
        slurm._find_binaries()
        slurm._identify_namespaces()  # an `up` killed before it saved them
        return slurm

    def _identify_namespaces(self) -> None:
        """Learn the identity of each of the cluster's namespaces that exists by name."""
        for ns in self.namespaces:
            role = ns.rpartition("-")[2]
            if role not in self._ns_idents:
                with contextlib.suppress(OSError):
                    st = os.stat(NETNS_DIR / ns)
                    self._ns_idents[role] = (st.st_dev, st.st_ino)

    def _save(self) -> None:
        """Write cluster.json: what ``down`` (another process) needs to find everything."""
        state = {
            "tag": self.tag,
            "nodes": len(self.nodes),
            "cpus": self.cpus,
            "settings": self.settings,
            "namespaces": list(self.namespaces),
            "netns": {k: list(v) for k, v in self._ns_idents.items()},
            "holders": self.holders,
            "daemons": self.daemons,
            "addresses": {h: self.address(h) for h in self.hosts},
            "lost": self.lost,
            "conf": str(self.conf),
        }
        tmp = self.workdir / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(state, indent=1) + "\n")
        tmp.replace(self.workdir / STATE_FILE)

    def close(self) -> list[str]:
        """Cancel jobs, stop the daemons, kill all else in the cluster's namespaces, delete them.

        Safe to call at any stage, also twice, also from another process after
        :meth:`attach`. Returns what could not be cleaned up (empty when everything is gone).
        """
        problems: list[str] = []
        if self._alive("slurmctld") and CONTROLLER in self.holders:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self.run("scancel", "--quiet", "--user=root", check=False, timeout_s=10)
                wait_until(
                    lambda: not self.run("squeue", "-h", "-o", "%i", check=False, timeout_s=10).stdout.strip(),
                    STOP_DEADLINE_S,
                )
        # Daemons first (slurmd before the controller, munged last), each given time to stop.
        order = [f"slurmd-{n}" for n in self.nodes] + ["slurmctld", "munged"]
        for name in order:
            if self._alive(name):
                self._signal(name, signal.SIGTERM)
        for name in order:
            if not self._stopped(name, STOP_DEADLINE_S):
                self._signal(name, signal.SIGKILL)
                if not self._stopped(name, STOP_DEADLINE_S):
                    problems.append(f"{name} (pid {self.daemons[name]}) survived SIGKILL")
        # slurmstepd and job processes are no children of slurmd any more: kill by namespace
        # (the holders too, which takes the UTS and mount namespaces with them).
        deadline = time.monotonic() + STOP_DEADLINE_S
        while (pids := self.namespace_pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        for proc in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)  # reap our own children
        if pids := self.namespace_pids():
            problems.append(f"processes still in the cluster's namespaces: {pids}")
        # Dead slurmstepds are reaped by init, which here does so only every ~2 s; wait a little so
        # that `ps` right after a test shows no "[slurmstepd] <defunct>" (they are dead already).
        wait_until(lambda: not orphan_zombies(), STOP_DEADLINE_S / 2)
        for ns in self.namespaces:
            if (NETNS_DIR / ns).exists():
                ip = subprocess.run(
                    [self._exe("ip"), "netns", "delete", ns], capture_output=True, text=True, timeout=15, check=False
                )
                if ip.returncode != 0 and (NETNS_DIR / ns).exists():
                    problems.append(f"ip netns delete {ns}: {ip.stderr.strip()}")
        self.holders.clear()
        return problems

    # -- clients -----------------------------------------------------------------------

    def in_namespace(self, *argv: str, host: str = CONTROLLER, cwd: Path | None = None) -> list[str]:
        """``argv`` prefixed so that it runs on ``host`` (by default the controller's, the
        only place from which the controller is reachable), in ``cwd`` (default: the
        current directory; entering a mount namespace would otherwise move it to /)."""
        holder = self.holders.get(host)
        if holder is None:
            raise SlurmUnavailable(f"host {host} of the cluster does not exist (yet)")
        wd = Path(cwd) if cwd is not None else Path.cwd()
        nsenter = [self._exe("nsenter"), "-t", str(holder), "--net", "--uts", "--mount", f"--wd={wd}", "--"]
        return [*nsenter, self._exe(argv[0]), *argv[1:]]

    def _exe(self, name: str) -> str:
        """The absolute path of a required binary (daemons live in /usr/sbin, maybe not on PATH)."""
        return self._bin.get(name, name)

    def client_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """``os.environ`` + :attr:`env` + ``env``, without inherited ``SLURM_*`` variables.

        Variables of an outer Slurm job (``SLURM_JOB_ID`` ...) would make sbatch and srun
        talk about a job this cluster does not know, so they are dropped first.
        """
        merged = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        merged.update(self.env)
        if env:
            merged.update(env)
        return merged

    def run(
        self,
        *argv: str,
        timeout_s: float = 30.0,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        host: str = CONTROLLER,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command on ``host`` (a Slurm client on the controller by default), capturing output.

        Raises :class:`subprocess.CalledProcessError` (with stderr in the message) when
        ``check`` and the command fails, :class:`subprocess.TimeoutExpired` after ``timeout_s``.
        """
        proc = subprocess.run(
            self.in_namespace(*argv, host=host, cwd=cwd),
            env=self.client_env(env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(
                proc.returncode, argv, proc.stdout, f"{proc.stderr.strip()} (slurmctld log: {self.log('slurmctld')})"
            )
        return proc

    def sbatch(
        self,
        script: Path,
        *args: str,
        options: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> int:
        """Submit ``script`` (with ``args``; sbatch ``options`` before it, which override
        the script's ``#SBATCH`` lines) and return the job id.

        The job gets the submitter's whole environment (``--export=ALL``: PATH, the venv,
        ``SLURM_CONF``) merged with ``env``; its output goes to :meth:`job_output_path`;
        it runs in ``cwd`` (default: the current directory).
        """
        workdir = Path(cwd) if cwd is not None else Path.cwd()
        proc = self.run(
            "sbatch",
            "--parsable",
            "--export=ALL",
            f"--partition={PARTITION}",
            f"--chdir={workdir}",
            f"--output={self.job_dir}/%j.out",
            *options,
            str(script),
            *args,
            env=env,
            cwd=workdir,
        )
        first = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        try:
            return int(first.split(";")[0])
        except ValueError:
            raise RuntimeError(f"sbatch printed no job id: {proc.stdout!r} {proc.stderr!r}") from None

    def show(self, kind: str, name: str) -> dict[str, str]:
        """``scontrol -o show KIND NAME`` as a dict (``JobState``, ``State``, ``Reason`` ...);
        empty when scontrol does not know it."""
        out = self.run("scontrol", "-o", "show", kind, name, check=False, timeout_s=15).stdout
        return dict(re.findall(r"(?:^|\s)([A-Za-z][A-Za-z:/_]*)=(\S*)", out))

    def job_state(self, job_id: int) -> str:
        """The job's current state (``PENDING``, ``RUNNING``, ``COMPLETED`` ...)."""
        state = self.show("job", str(job_id)).get("JobState")
        if state is None:
            raise RuntimeError(f"no JobState for job {job_id} (slurmctld log: {self.log('slurmctld')})")
        return state

    def node_state(self, node: str) -> str:
        """The node's state as scontrol says it (``IDLE``, ``ALLOCATED``, ``DOWN+NOT_RESPONDING`` ...)."""
        return self.show("node", node).get("State", "UNKNOWN")

    def wait(self, job_id: int, timeout_s: float) -> str:
        """Poll until the job reaches a final state and return it.

        After ``timeout_s`` the job is cancelled and :class:`TimeoutError` raised, so a stuck
        job never outlives the caller that waits for it.
        """
        deadline = time.monotonic() + timeout_s
        state = "UNKNOWN"
        while True:
            state = self.job_state(job_id)
            if state in FINAL_STATES:
                return state
            if time.monotonic() >= deadline:
                break
            time.sleep(0.25)
        self.run("scancel", str(job_id), check=False, timeout_s=15)
        raise TimeoutError(
            f"job {job_id} still {state} after {timeout_s:g} s (cancelled); output: {self.job_output_path(job_id)}, "
            f"slurmd logs: {self.log_dir}/slurmd-*.log"
        )

    def job_output(self, job_id: int) -> str:
        """The job's stdout and stderr so far ("" if it wrote nothing yet)."""
        try:
            return self.job_output_path(job_id).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # -- losing a node -----------------------------------------------------------------

    def lose_node(self, node: str, how: str = "kill") -> float:
        """Take ``node`` away under whatever runs there; returns CLOCK_MONOTONIC at the loss.

        ``kill``: SIGKILL every process on the node (its slurmd, every slurmstepd, every job
        process), as when a machine loses power; only the holder of its namespaces stays,
        the machine's empty shell. ``cut``: unplug it (its port on the bridge down), so
        everything on it runs on but nothing reaches it, nor it anything.
        """
        if node not in self.nodes:
            raise ValueError(f"{node!r}: this cluster's nodes are {', '.join(self.nodes)}")
        if how not in ("kill", "cut"):
            raise ValueError(f"how={how!r}: expected kill or cut")
        now = time.monotonic()
        if how == "cut":
            subprocess.run(
                [self._exe("ip"), "-n", self.netns("hub"), "link", "set", self.port(node), "down"],
                check=True,
                timeout=15,
                capture_output=True,
            )
        else:
            keep = {self.holders.get(node)}
            deadline = time.monotonic() + STOP_DEADLINE_S
            while pids := [p for p in self.namespace_pids((node,)) if p not in keep]:
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"node {node}: processes {pids} survived SIGKILL for {STOP_DEADLINE_S:g} s")
                time.sleep(0.02)
            proc = self._procs.get(f"slurmd-{node}")
            if proc is not None:
                proc.wait(timeout=STOP_DEADLINE_S)
        self.lost[node] = now
        self._save()
        return now

    # -- processes ---------------------------------------------------------------------

    def namespace_pids(self, hosts: Iterable[str] | None = None) -> list[int]:
        """Live processes in the cluster's network namespaces (of ``hosts`` only, when given;
        zombies excluded); works after the namespaces were deleted too."""
        roles = ["hub", *self.hosts] if hosts is None else list(hosts)
        idents = {self._ns_idents[r] for r in roles if r in self._ns_idents}
        if not idents:
            return []
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                st = os.stat(entry / "ns" / "net")
            except OSError:
                continue  # gone, or a zombie (whose namespaces can no longer be read)
            if (st.st_dev, st.st_ino) in idents:
                pids.append(int(entry.name))
        return sorted(pids)

    def _alive(self, name: str) -> bool:
        """Whether daemon ``name`` still runs (a child we started is reaped on the way)."""
        proc = self._procs.get(name)
        if proc is not None:
            return proc.poll() is None
        pid = self.daemons.get(name)
        return pid is not None and alive(pid) and pid in self.namespace_pids()

    def _stopped(self, name: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for daemon ``name`` to end; whether it did."""
        return wait_until(lambda: not self._alive(name), timeout_s)

    def _signal(self, name: str, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, KeyError):
            os.kill(self.daemons[name], sig)


def down_all() -> list[str]:
    """Remove every cluster of this tool on the machine, found by namespace name: kill what
    runs in them, delete them. For a cluster whose WORKDIR is gone; returns what was left."""
    problems: list[str] = []
    for tag in sorted({ns[len(NETNS_PREFIX) :].rpartition("-")[0] for ns in leftover_namespaces()}):
        slurm = LocalSlurm(Path("/nonexistent"))
        slurm.tag = tag
        slurm._find_binaries()
        roles = [ns.rpartition("-")[2] for ns in leftover_namespaces() if ns.startswith(f"{NETNS_PREFIX}{tag}-")]
        slurm.nodes = tuple(sorted((r for r in roles if r.startswith("n")), key=lambda r: int(r[1:])))
        slurm._identify_namespaces()
        problems += slurm.close()
    return problems
