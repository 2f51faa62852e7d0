#!/usr/bin/env python3
"""A private, throw-away Slurm cluster on one machine: one controller and N nodes, each in
a host namespace of its own, for ftbench's multi-node runs and tests.

    python3 tools/slurm/localslurm.py up WORKDIR --nodes 2 [--set SlurmdTimeout=300 ...]
    python3 tools/slurm/localslurm.py run WORKDIR -- sbatch --nodes=2 ... tools/slurm/ftbench.sbatch ...
    python3 tools/slurm/localslurm.py run --host n1 WORKDIR -- hostname   # options before WORKDIR
    python3 tools/slurm/localslurm.py lose-node WORKDIR n1 [--how kill|cut]
    python3 tools/slurm/localslurm.py down WORKDIR          # or: down --all (every ftslurm-* namespace)

As root, from Debian's packages (``apt-get install -y slurmd slurmctld slurm-client munge``:
Slurm 22.05), with every file (config, state, logs, munge key and socket, pid files) under
WORKDIR and nothing in /etc. ``up`` leaves the daemons running and records them in
``WORKDIR/cluster.json``; ``down`` (also what ``up`` does when it fails half-way) stops
them and removes everything: daemons, slurmstepd, job processes, namespaces. The tests use
the same code as a context manager (``tests/integ/slurm.py``). Standard library only, so
that Debian's ``python3`` runs it without ftbench's environment.

Topology for ``--nodes 2`` (tag ``t``; ``n0`` .. ``nN-1``, ``ctl``, ``hub``)::

    netns ftslurm-t-hub : bridge ftsbr, ports ftsp-ctl, ftsp-n0, ftsp-n1 (veth ends)
    netns ftslurm-t-ctl : eth0 10.251.0.254/24, host name ctl: munged, slurmctld, clients
    netns ftslurm-t-n0  : eth0 10.251.0.1/24,   host name n0:  slurmd -N n0, its jobs
    netns ftslurm-t-n1  : eth0 10.251.0.2/24,   host name n1:  slurmd -N n1, its jobs

The subnet is the same in every cluster: it exists only inside the cluster's namespaces,
which nothing else reaches (the root namespace has no port on the bridge).

Why it is built the way it is (each point was a failure without it):

* slurmctld and slurmd listen on every interface, so every daemon runs in a network
  namespace of the cluster's own; they cannot collide with a system Slurm or another test.
  A namespace needs a non-loopback IPv4 address, or Slurm's ``getaddrinfo(AI_ADDRCONFIG)``
  fails ("Name or service not known"); the veth into the bridge provides it.
* Each host is also a UTS namespace (its host name: slurmctld starts only where the host
  name is ``SlurmctldHost``'s, ranks and torchrun advertise theirs) and a mount namespace
  in which WORKDIR/etc/hosts is bind-mounted on /etc/hosts: every host resolves every
  other by name, as on a site with DNS, and the machine's /etc/hosts is untouched. A
  ``holder`` process (``sleep``) keeps these namespaces alive while daemons come and go;
  everything else enters them with ``nsenter -t HOLDER --net --uts --mount``.
* Daemons enter the namespaces with ``nsenter``, not ``ip netns exec``: the latter
  remounts /sys, slurmd then finds no /sys/fs/cgroup and stops with "Unable to
  initialize cgroup plugin".
* One munged, in the controller's namespaces, serves every host: its socket is a path in
  WORKDIR, and a path socket is reached from any network namespace. (A site runs one per
  node with one shared key; Slurm cannot tell the difference.)
* Each slurmd is told its node name (``-N``) and its spool, pid and log files carry it
  (``%n``), so the nodes share one slurm.conf, as a site's do.
* ``proctrack/linuxproc`` and ``task/none``: no cgroup hierarchy is created or needed.
* Each node declares ``cpus`` CPUs (8 by default) and ``SlurmdParameters=config_overrides``
  makes slurmd report the declared figures instead of the 2 real cores, so a job of
  ``--ntasks=3`` is accepted on a 2-core machine instead of the node being drained.
* Clients (sbatch, srun, scontrol ...) reach the controller only from inside the cluster,
  so every client command here runs in the controller's namespaces (the cluster's login
  node); job processes inherit their slurmd's namespaces, so ``srun`` inside a job needs
  nothing extra.
* Teardown cannot rely on process trees alone: slurmstepd daemonizes away from slurmd.
  Every process that still lives in one of the cluster's network namespaces is therefore
  killed before the namespaces are deleted; nothing survives, also when start-up failed
  half-way or the ``up`` process itself was killed (``down`` reads cluster.json, and
  ``down --all`` finds the namespaces by name).

One Slurm rule matters to job scripts (since 20.11, true of any cluster): a step started
without ``--exact`` gets every CPU of the job, so a second concurrent ``srun`` waits ("Job N
step creation temporarily disabled, retrying (Requested nodes are busy)") until the first
ends, unless the first used ``--exact`` or the second uses ``--overlap``. Plain commands of
the batch shell are no step and run alongside any step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType

CONTROLLER = "ctl"
"""Host name of the controller's namespace (slurmctld, munged; where clients run)."""

PARTITION = "ftbench"

SUBNET = "10.251.0"
"""The /24 of every cluster; it lives only inside the cluster's own namespaces."""
CONTROLLER_ADDRESS = f"{SUBNET}.254"

NETNS_PREFIX = "ftslurm-"
"""Every namespace of a cluster is named ``ftslurm-TAG-ROLE``; ``down --all`` finds them so."""
NETNS_DIR = Path("/run/netns")

FINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)
"""Job states after which a job never runs again (``wait`` would otherwise wait in vain)."""

START_DEADLINE_S = 60.0
"""How long :meth:`LocalSlurm.start` may take in all, from the first daemon to idle nodes."""

STOP_DEADLINE_S = 10.0
"""How long each stage of teardown waits for processes before it escalates."""

TEST_TIMERS: dict[str, str] = {
    "SlurmdTimeout": "30",
    "KillWait": "5",
    "MessageTimeout": "10",
    "InactiveLimit": "0",
    "MinJobAge": "600",
}
"""The timing knobs of a test cluster: a dead node or step is noticed within a test's time.
``MinJobAge`` keeps a finished job in ``scontrol show job`` (there is no accounting
database, so no ``sacct``) for 10 minutes."""

SLURM_DEFAULT_TIMERS: dict[str, str] = {
    "SlurmdTimeout": "300",
    "KillWait": "30",
    "MessageTimeout": "10",
    "TCPTimeout": "2",
    "InactiveLimit": "0",
    "MinJobAge": "600",  # Slurm's default is 300; kept long so the final state can be read
}
"""Slurm 22.05's own defaults of the knobs that decide how a lost node is handled
(slurm.conf(5)), for measurements "as shipped"."""

REQUIRED_BINARIES = (
    "munged",
    "munge",
    "slurmctld",
    "slurmd",
    "slurmstepd",
    "sbatch",
    "srun",
    "scontrol",
    "scancel",
    "squeue",
    "sinfo",
    "ip",
    "nsenter",
    "unshare",
    "sleep",
)

STATE_FILE = "cluster.json"
"""What ``up`` leaves in WORKDIR for ``down``, ``run`` and ``lose-node``."""


class SlurmUnavailable(Exception):
    """The local cluster cannot run here; the message is a one-line reason (a test skips with it)."""


class LocalSlurm:
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
                _wait_until(
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
        _wait_until(lambda: not _orphan_zombies(), STOP_DEADLINE_S / 2)
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
        return pid is not None and _alive(pid) and pid in self.namespace_pids()

    def _stopped(self, name: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for daemon ``name`` to end; whether it did."""
        return _wait_until(lambda: not self._alive(name), timeout_s)

    def _signal(self, name: str, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, KeyError):
            os.kill(self.daemons[name], sig)

    # -- start-up ----------------------------------------------------------------------

    def _find_binaries(self) -> None:
        found = {b: shutil.which(b, path=_SEARCH_PATH) for b in REQUIRED_BINARIES}
        self._bin = {b: path for b, path in found.items() if path is not None}

    def _check_prerequisites(self) -> None:
        """Fail fast, with one line, where the cluster cannot possibly start."""
        if os.geteuid() != 0:
            raise SlurmUnavailable("LocalSlurm needs root (network namespaces, daemons running as root)")
        self._find_binaries()
        missing = [b for b in REQUIRED_BINARIES if b not in self._bin]
        if missing:
            raise SlurmUnavailable(
                f"LocalSlurm: binaries not found: {', '.join(missing)} "
                "(apt-get install -y slurmd slurmctld slurm-client munge iproute2 util-linux)"
            )

    def _write_hosts(self) -> None:
        """WORKDIR/etc/hosts, bind-mounted on /etc/hosts in every host: the cluster's DNS."""
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{self.address(h)} {h}" for h in self.hosts]
        (self.workdir / "etc" / "hosts").write_text("\n".join(lines) + "\n")

    def _ip(self, *argv: str) -> None:
        proc = subprocess.run([self._exe("ip"), *argv], capture_output=True, text=True, timeout=15, check=False)
        if proc.returncode != 0:
            raise SlurmUnavailable(f"LocalSlurm: `ip {' '.join(argv)}` failed: {proc.stderr.strip()}")

    def _add_netns(self, ns: str) -> None:
        self._ip("netns", "add", ns)
        st = os.stat(NETNS_DIR / ns)
        self._ns_idents[ns.rpartition("-")[2]] = (st.st_dev, st.st_ino)
        self._ip("-n", ns, "link", "set", "lo", "up")

    def _create_network(self) -> None:
        """The hub with its bridge, and per host a namespace whose eth0 is a veth into it."""
        hub = self.netns("hub")
        self._add_netns(hub)
        self._ip("-n", hub, "link", "add", "ftsbr", "type", "bridge")
        self._ip("-n", hub, "link", "set", "ftsbr", "up")
        for host in self.hosts:
            ns = self.netns(host)
            self._add_netns(ns)
            port = self.port(host)
            self._ip("-n", hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self._ip("-n", hub, "link", "set", port, "master", "ftsbr", "up")
            self._ip("-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
            self._ip("-n", ns, "link", "set", "eth0", "up")

    def _start_holder(self, host: str, deadline: float) -> None:
        """The process that holds ``host``'s UTS and mount namespaces (named ``host``, with
        the cluster's hosts file on /etc/hosts), inside its network namespace."""
        hosts_file = self.workdir / "etc" / "hosts"
        script = 'mount --bind "$1" /etc/hosts && hostname "$2" && exec sleep infinity'
        argv = [
            self._exe("nsenter"),
            f"--net={NETNS_DIR / self.netns(host)}",
            "--",
            self._exe("unshare"),
            "--uts",
            "--mount",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            script,
            "holder",
            str(hosts_file),
            host,
        ]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        self._procs[f"holder-{host}"] = proc
        self.holders[host] = proc.pid

        def ready() -> bool:
            if proc.poll() is not None:
                raise SlurmUnavailable(
                    f"LocalSlurm: the holder of host {host}'s namespaces exited with {proc.returncode} "
                    "(unshare --uts --mount, mount --bind on /etc/hosts, hostname)"
                )
            try:
                return Path(f"/proc/{proc.pid}/comm").read_text().strip() == "sleep"
            except OSError:
                return False

        self._await(f"holder-{host}", ready, deadline, "to hold its namespaces")
        name = self.run("hostname", host=host, timeout_s=10).stdout.strip()
        if name != host:
            raise SlurmUnavailable(f"LocalSlurm: host {host}'s UTS namespace says its name is {name!r}")

    def _spawn(self, name: str, host: str, argv: list[str]) -> None:
        """Start a daemon in the foreground on ``host``; its stdout/stderr go to ``<name>.out``.

        ``nsenter`` execs the daemon (no fork without a PID namespace), so the Popen is the
        daemon itself and ``terminate()`` reaches it. Its own session keeps terminal signals
        of the caller away from it.
        """
        with (self.log_dir / f"{name}.out").open("wb") as out:
            proc = subprocess.Popen(
                self.in_namespace(*argv, host=host, cwd=self.workdir),
                env=self.client_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._procs[name] = proc
        self.daemons[name] = proc.pid

    def _start_munged(self, deadline: float) -> None:
        """munged with its own key and socket, so a system munge (if any) is left alone.

        ``--force``: munged refuses a socket whose parent directories are not all
        world-executable, and pytest's tmp_path lives under a 0700 directory.
        """
        mdir = self.munge_socket.parent
        mdir.mkdir(mode=0o755, parents=True, exist_ok=True)
        mdir.chmod(0o755)
        key = mdir / "munge.key"
        if not key.exists():
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(1024))
        self._spawn(
            "munged",
            CONTROLLER,
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={mdir / 'munged.pid'}",
                f"--seed-file={mdir / 'munged.seed'}",
                f"--log-file={self.log('munged')}",
                "--num-threads=2",
            ],
        )

        def works() -> bool:
            if not self.munge_socket.exists():
                return False
            probe = subprocess.run(
                [self._exe("munge"), "-n", f"--socket={self.munge_socket}"],
                capture_output=True,
                timeout=10,
                check=False,
            )
            return probe.returncode == 0

        self._await("munged", works, deadline, "to answer on its socket")

    def config_lines(self) -> list[str]:
        """The lines of slurm.conf (without the empty plugstack.conf it names)."""
        w = self.workdir
        lines = [
            "ClusterName=ftbench",
            f"SlurmctldHost={CONTROLLER}({CONTROLLER_ADDRESS})",
            "SlurmUser=root",
            "SlurmdUser=root",
            "SlurmctldPort=6817",
            "SlurmdPort=6818",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "CredType=cred/munge",
            f"StateSaveLocation={w / 'state' / 'ctld'}",
            f"SlurmdSpoolDir={w / 'state' / 'slurmd-%n'}",
            f"SlurmctldPidFile={w / 'state' / 'slurmctld.pid'}",
            f"SlurmdPidFile={w / 'state' / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.log('slurmctld')}",
            f"SlurmdLogFile={self.log_dir / 'slurmd-%n.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "LogTimeFormat=iso8601_ms",
            f"PlugStackConfig={w / 'etc' / 'plugstack.conf'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "MailProg=/bin/true",  # else slurmctld logs "Configured MailProg is invalid"
            "SwitchType=switch/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            # Report the declared CPUs, not the 2 real cores, or the node is drained as "Low CPUs".
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
        ]
        for key, value in self.settings.items():  # a setting replaces a line of the same key
            same = [i for i, line in enumerate(lines) if line.split("=", 1)[0].lower() == key.lower()]
            if same:
                lines[same[0]] = f"{key}={value}"
            else:
                lines.append(f"{key}={value}")
        lines += [f"NodeName={n} NodeAddr={self.address(n)} CPUs={self.cpus} State=UNKNOWN" for n in self.nodes]
        nodes = ",".join(self.nodes)
        lines.append(f"PartitionName={PARTITION} Nodes={nodes} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES")
        return lines

    def _write_config(self) -> None:
        """slurm.conf (and an empty plugstack.conf, so the system's SPANK plugins stay out)."""
        (self.workdir / "etc" / "plugstack.conf").write_text("")
        self.conf.write_text("\n".join(self.config_lines()) + "\n")

    def _start_slurmctld(self, deadline: float) -> None:
        """The controller, clean start (``-c``: no state from an earlier run), answering ``scontrol ping``."""
        self._spawn("slurmctld", CONTROLLER, ["slurmctld", "-D", "-c", "-f", str(self.conf)])

        def up() -> bool:
            ping = self.run("scontrol", "ping", check=False, timeout_s=10)
            return ping.returncode == 0 and "UP" in ping.stdout

        self._await("slurmctld", up, deadline, "to answer `scontrol ping`")

    def _all_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout_s=10).stdout
        states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
        return all(states.get(n) == "idle" for n in self.nodes)

    def _await(self, name: str, ready: Callable[[], bool], deadline: float, what: str) -> None:
        """Poll ``ready`` until the deadline; fail at once if any daemon died meanwhile."""
        while True:
            for dname, proc in self._procs.items():
                if proc.poll() is not None:
                    log = self.log_dir / f"{dname}.log"
                    raise SlurmUnavailable(
                        f"LocalSlurm: {dname} exited with {proc.returncode} while waiting for {name} {what}; "
                        f"log: {log} ({_tail(log) or _tail(self.log_dir / f'{dname}.out')})"
                    )
            with contextlib.suppress(subprocess.TimeoutExpired):
                if ready():
                    return
            if time.monotonic() >= deadline:
                extra = ""
                if name == "slurmd":
                    shown = {n: self.show("node", n) for n in self.nodes}
                    extra = "; ".join(f"{n}: State={s.get('State')} Reason={s.get('Reason')}" for n, s in shown.items())
                raise SlurmUnavailable(
                    f"LocalSlurm: timed out after {START_DEADLINE_S:g} s waiting for {name} {what} {extra}; "
                    f"logs: {self.log_dir}"
                )
            time.sleep(0.2)


_SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"])


def _wait_until(ready: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``ready`` every 0.1 s for up to ``timeout_s``; whether it came true."""
    deadline = time.monotonic() + timeout_s
    while True:
        if ready():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is dead: it only waits to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _orphan_zombies() -> list[int]:
    """Zombies of Slurm or munge daemons waiting for init to reap them (cosmetic, but `ps` shows them)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm, _, rest = stat.partition("(")[2].rpartition(")")
        fields = rest.split()
        if fields[:2] == ["Z", "1"] and comm in ("slurmstepd", "slurmd", "slurmctld", "munged"):
            found.append(int(entry.name))
    return found


def _tail(path: Path, lines: int = 3) -> str:
    """The last lines of a log, joined on one line, for an error message that says why."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def leftover_namespaces() -> list[str]:
    """Every ``ftslurm-*`` network namespace on the machine (a cluster's, or a dead one's)."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(NETNS_PREFIX))
    except FileNotFoundError:
        return []


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


def parse_settings(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise SystemExit(f"--set {pair!r}: expected KEY=VALUE (a slurm.conf key)")
        out[k] = v
    return out


def main(argv: list[str] | None = None) -> int:
    """The command line: up, down, run, lose-node, status (see the module's docstring)."""
    p = argparse.ArgumentParser(prog="localslurm", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start a cluster in WORKDIR and leave it running")
    up.add_argument("workdir", type=Path)
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--cpus", type=int, default=8, help="CPUs each node declares")
    up.add_argument("--timers", choices=("test", "slurm-defaults"), default="test")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a slurm.conf setting")
    down = sub.add_parser("down", help="stop the cluster of WORKDIR and remove everything of it")
    down.add_argument("workdir", type=Path, nargs="?")
    down.add_argument("--all", action="store_true", help="every ftslurm-* cluster on the machine")
    run = sub.add_parser("run", help="run a command on a host of the cluster (default: the controller)")
    run.add_argument("workdir", type=Path)
    run.add_argument("--host", default=CONTROLLER)
    run.add_argument("command", nargs=argparse.REMAINDER)
    lose = sub.add_parser("lose-node", help="take a node away under its jobs")
    lose.add_argument("workdir", type=Path)
    lose.add_argument("node")
    lose.add_argument("--how", choices=("kill", "cut"), default="kill")
    status = sub.add_parser("status", help="the nodes' and jobs' states")
    status.add_argument("workdir", type=Path)
    args = p.parse_args(argv)

    try:
        if args.cmd == "up":
            timers = TEST_TIMERS if args.timers == "test" else SLURM_DEFAULT_TIMERS
            slurm = LocalSlurm(
                args.workdir, nodes=args.nodes, cpus=args.cpus, timers=timers, settings=parse_settings(args.set)
            )
            slurm.start()
            print(
                f"cluster {slurm.tag} up in {slurm.workdir}: controller {CONTROLLER} ({CONTROLLER_ADDRESS}), "
                f"nodes {', '.join(f'{n} ({slurm.address(n)})' for n in slurm.nodes)}"
            )
            print(f"clients: {sys.argv[0]} run {slurm.workdir} -- sinfo")
            return 0
        if args.cmd == "down":
            if args.all:
                problems = down_all()
            elif args.workdir is None:
                p.error("down: name WORKDIR or give --all")
            else:
                problems = LocalSlurm.attach(args.workdir).close()
            for line in problems:
                print(f"localslurm: left behind: {line}", file=sys.stderr)
            return 1 if problems else 0
        slurm = LocalSlurm.attach(args.workdir)
        if args.cmd == "run":
            command = args.command[1:] if args.command[:1] == ["--"] else args.command
            if not command:
                p.error("run: give a command after --")
            env = slurm.client_env()
            return subprocess.run(slurm.in_namespace(*command, host=args.host), env=env, check=False).returncode
        if args.cmd == "lose-node":
            t = slurm.lose_node(args.node, args.how)
            print(f"{args.node} lost ({args.how}) at CLOCK_MONOTONIC {t:.6f}")
            return 0
        if args.cmd == "status":
            print(slurm.run("sinfo", "-N", "-o", "%N %T %E", check=False).stdout, end="")
            print(slurm.run("squeue", "-o", "%i %T %R %N", check=False).stdout, end="")
            return 0
    except SlurmUnavailable as e:
        print(f"localslurm: {e}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
