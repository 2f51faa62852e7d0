"""A private, throw-away one-node Slurm cluster on this machine, for integration tests.

The real benchmark is launched by a Slurm batch script (``srun ... ftbench host ... &`` then
``ftbench run ...`` in the batch shell). To test that path without a site cluster,
:class:`LocalSlurm` starts munged, slurmctld and slurmd as root, with every file (config,
state, logs, munge key and socket, pid files) under a test's ``workdir`` and nothing in /etc.

Why it is built the way it is (each point was a failure without it):

* slurmctld and slurmd listen on every interface, so all three daemons run in a fresh
  network namespace of their own; they cannot collide with a system Slurm or another test.
  The namespace needs a non-loopback IPv4 address, or Slurm's ``getaddrinfo(AI_ADDRCONFIG)``
  fails ("Name or service not known"); this kernel has no ``dummy`` links, so a veth pair
  made inside the namespace provides one.
* Daemons enter the namespace with ``nsenter --net`` rather than ``ip netns exec``: the
  latter remounts /sys, slurmd then finds no /sys/fs/cgroup and stops with "Unable to
  initialize cgroup plugin".
* Controller and node are ``vm`` at 127.0.0.1 and slurmd is told its name (``-N``), so the
  cluster does not depend on the machine's host name or DNS.
* ``proctrack/linuxproc`` and ``task/none``: no cgroup hierarchy is created or needed.
* The node declares ``cpus`` CPUs (8 by default) and ``SlurmdParameters=config_overrides``
  makes slurmd report the declared figures instead of the 2 real cores, so a job of
  ``--ntasks=3`` is accepted on a 2-core machine instead of the node being drained.
* Clients (sbatch, srun, scontrol ...) reach the controller at 127.0.0.1 only from inside
  the namespace, so every client command here runs through ``nsenter`` as well; job
  processes inherit slurmd's namespace, so ``srun`` inside a job needs nothing extra.
* Teardown cannot rely on process trees alone: slurmstepd daemonizes away from slurmd.
  Every process that still lives in the namespace is therefore killed before the namespace
  is deleted; nothing survives, also when :meth:`LocalSlurm.__enter__` failed half-way.

One Slurm rule matters to job scripts (since 20.11, true of any cluster): a step started
without ``--exact`` gets every CPU of the job, so a second concurrent ``srun`` waits ("Job N
step creation temporarily disabled, retrying (Requested nodes are busy)") until the first
ends, unless the first used ``--exact`` or the second uses ``--overlap``. Plain commands of
the batch shell are no step and run alongside any step.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

NODE = "vm"
"""Node name of the single node; also the controller's name (both at 127.0.0.1)."""

PARTITION = "ftbench"

FINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)
"""Job states after which a job never runs again (``wait`` would otherwise wait in vain)."""

START_DEADLINE_S = 60.0
"""How long ``__enter__`` may take in all, from the first daemon to an idle node."""

STOP_DEADLINE_S = 10.0
"""How long each stage of teardown waits for processes before it escalates."""

VETH_ADDRESS = "10.251.0.1/24"
"""The namespace's non-loopback address; private to the namespace, so it never collides."""

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
)


class SlurmUnavailable(Exception):
    """The local cluster cannot run here; the message is a one-line reason (a test skips with it)."""


class LocalSlurm:
    """A one-node Slurm cluster in a private network namespace; a context manager.

    ``with LocalSlurm(tmp_path) as slurm:`` starts it and waits until the node is idle;
    leaving the block cancels every job, stops the daemons, kills whatever else still runs
    in the namespace and deletes the namespace.
    """

    def __init__(self, workdir: Path, *, cpus: int = 8) -> None:
        self.workdir: Path = Path(workdir).resolve()
        self.cpus: int = cpus
        self.namespace: str = f"ftslurm-{uuid.uuid4().hex[:10]}"
        self.conf: Path = self.workdir / "etc" / "slurm.conf"
        self.log_dir: Path = self.workdir / "log"
        self.job_dir: Path = self.workdir / "jobs"
        self.munge_socket: Path = self.workdir / "munge" / "munge.socket"
        self.env: dict[str, str] = {"SLURM_CONF": str(self.conf)}
        """Environment for Slurm clients (merged over ``os.environ``); run them via :meth:`run`."""
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._ns_ident: tuple[int, int] | None = None
        self._ns_created = False
        self._bin: dict[str, str] = {}

    # -- paths -------------------------------------------------------------------------

    @property
    def netns_path(self) -> Path:
        """The bind mount that names the namespace (what ``nsenter --net=`` takes)."""
        return Path("/run/netns") / self.namespace

    def log(self, daemon: str) -> Path:
        """The log file of ``daemon`` (``munged``, ``slurmctld`` or ``slurmd``)."""
        return self.log_dir / f"{daemon}.log"

    def job_output_path(self, job_id: int) -> Path:
        """Where :meth:`sbatch` sends a job's stdout and stderr."""
        return self.job_dir / f"{job_id}.out"

    @property
    def daemon_pids(self) -> dict[str, int]:
        """Pids of the daemons started so far, by name; a test checks them after exit."""
        return {name: p.pid for name, p in self._procs.items()}

    # -- context manager ---------------------------------------------------------------

    def __enter__(self) -> LocalSlurm:
        """Start munged, slurmctld and slurmd and wait (60 s in all) until the node is idle."""
        self._check_prerequisites()
        deadline = time.monotonic() + START_DEADLINE_S
        try:
            for d in (self.workdir / "etc", self.log_dir, self.job_dir, self.workdir / "state" / "ctld"):
                d.mkdir(parents=True, exist_ok=True)
            (self.workdir / "state" / "slurmd").mkdir(parents=True, exist_ok=True)
            self._create_namespace()
            self._start_munged(deadline)
            self._write_config()
            self._start_slurmctld(deadline)
            self._start_slurmd(deadline)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Tear everything down; complain about survivors only if no other error is in flight."""
        problems = self.close()
        if problems and exc is None:
            raise RuntimeError("LocalSlurm teardown left things behind: " + "; ".join(problems))

    # -- clients -----------------------------------------------------------------------

    def in_namespace(self, *argv: str) -> list[str]:
        """``argv`` prefixed so that it runs in the cluster's namespace (the only place it is reachable)."""
        return [self._exe("nsenter"), f"--net={self.netns_path}", "--", self._exe(argv[0]), *argv[1:]]

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
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster (in its namespace), capturing output.

        Raises :class:`subprocess.CalledProcessError` (with stderr in the message) when
        ``check`` and the command fails, :class:`subprocess.TimeoutExpired` after ``timeout_s``.
        """
        proc = subprocess.run(
            self.in_namespace(*argv),
            env=self.client_env(env),
            cwd=cwd,
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
        env: dict[str, str] | None = None,
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

    def job_state(self, job_id: int) -> str:
        """The job's current state (``PENDING``, ``RUNNING``, ``COMPLETED`` ...)."""
        out = self.run("scontrol", "-o", "show", "job", str(job_id), timeout_s=15).stdout
        m = re.search(r"\bJobState=(\S+)", out)
        if not m:
            raise RuntimeError(f"no JobState for job {job_id} in: {out!r}")
        return m.group(1)

    def wait(self, job_id: int, timeout_s: float) -> str:
        """Poll until the job reaches a final state and return it.

        After ``timeout_s`` the job is cancelled and :class:`TimeoutError` raised, so a stuck
        job never outlives the test that waits for it.
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
            f"slurmd log: {self.log('slurmd')}"
        )

    def job_output(self, job_id: int) -> str:
        """The job's stdout and stderr so far ("" if it wrote nothing yet)."""
        try:
            return self.job_output_path(job_id).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # -- teardown ----------------------------------------------------------------------

    def namespace_pids(self) -> list[int]:
        """Live processes in the cluster's namespace (zombies excluded); works after deletion too."""
        if self._ns_ident is None:
            return []
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                st = os.stat(entry / "ns" / "net")
            except OSError:
                continue  # gone, or a zombie (whose namespaces can no longer be read)
            if (st.st_dev, st.st_ino) == self._ns_ident:
                pids.append(int(entry.name))
        return sorted(pids)

    def close(self) -> list[str]:
        """Cancel jobs, stop the daemons, kill all else in the namespace, delete it.

        Safe to call at any stage, also twice. Returns what could not be cleaned up
        (empty when everything is gone).
        """
        problems: list[str] = []
        ctld = self._procs.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self.run("scancel", "--quiet", "--user=root", check=False, timeout_s=10)
                _wait_until(
                    lambda: not self.run("squeue", "-h", "-o", "%i", check=False, timeout_s=10).stdout.strip(),
                    STOP_DEADLINE_S,
                )
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self._procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                proc.wait(timeout=STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                try:
                    proc.wait(timeout=STOP_DEADLINE_S)
                except subprocess.TimeoutExpired:
                    problems.append(f"{name} (pid {proc.pid}) survived SIGKILL")
        # slurmstepd and job processes are no children of slurmd any more: kill by namespace.
        deadline = time.monotonic() + STOP_DEADLINE_S
        while (pids := self.namespace_pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        if pids := self.namespace_pids():
            problems.append(f"processes still in namespace {self.namespace}: {pids}")
        # Dead slurmstepds are reaped by init, which here does so only every ~2 s; wait a little so
        # that `ps` right after a test shows no "[slurmstepd] <defunct>" (they are dead already).
        _wait_until(lambda: not _orphan_zombies(), STOP_DEADLINE_S / 2)
        if self._ns_created or self.netns_path.exists():
            ip = subprocess.run(
                [self._exe("ip"), "netns", "delete", self.namespace],
                capture_output=True,
                text=True,
                timeout=15,
                check=False,
            )
            if ip.returncode != 0 and self.netns_path.exists():
                problems.append(f"ip netns delete {self.namespace}: {ip.stderr.strip()}")
            self._ns_created = False
        return problems

    # -- start-up ----------------------------------------------------------------------

    def _check_prerequisites(self) -> None:
        """Fail fast, with one line, where the cluster cannot possibly start."""
        if os.geteuid() != 0:
            raise SlurmUnavailable("LocalSlurm needs root (network namespaces, daemons running as root)")
        found = {b: shutil.which(b, path=_SEARCH_PATH) for b in REQUIRED_BINARIES}
        missing = [b for b, path in found.items() if path is None]
        if missing:
            raise SlurmUnavailable(f"LocalSlurm: binaries not found: {', '.join(missing)}")
        self._bin = {b: path for b, path in found.items() if path is not None}

    def _create_namespace(self) -> None:
        """A fresh namespace with lo and a veth pair up, the pair carrying a private IPv4 address."""
        ns = self.namespace
        steps = [
            ["ip", "netns", "add", ns],
            ["ip", "-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
            ["ip", "-n", ns, "addr", "add", VETH_ADDRESS, "dev", "v0"],
            ["ip", "-n", ns, "link", "set", "v0", "up"],
            ["ip", "-n", ns, "link", "set", "v1", "up"],
            ["ip", "-n", ns, "link", "set", "lo", "up"],
        ]
        for i, argv in enumerate(steps):
            proc = subprocess.run(
                [self._exe(argv[0]), *argv[1:]], capture_output=True, text=True, timeout=15, check=False
            )
            if proc.returncode != 0:
                raise SlurmUnavailable(f"LocalSlurm: `{' '.join(argv)}` failed: {proc.stderr.strip()}")
            if i == 0:
                self._ns_created = True
                st = os.stat(self.netns_path)
                self._ns_ident = (st.st_dev, st.st_ino)

    def _spawn(self, name: str, argv: list[str]) -> None:
        """Start a daemon in the foreground, in the namespace; its stdout/stderr go to ``<name>.out``.

        ``nsenter`` execs the daemon (no fork for a network namespace), so the Popen is the
        daemon itself and ``terminate()`` reaches it. Its own session keeps terminal signals
        of the test run away from it.
        """
        out = (self.log_dir / f"{name}.out").open("wb")
        try:
            self._procs[name] = subprocess.Popen(
                self.in_namespace(*argv),
                env=self.client_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.workdir,
            )
        finally:
            out.close()

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

    def _write_config(self) -> None:
        """slurm.conf (and an empty plugstack.conf, so the system's SPANK plugins stay out)."""
        w = self.workdir
        plugstack = w / "etc" / "plugstack.conf"
        plugstack.write_text("")
        lines = [
            "ClusterName=ftbench",
            f"SlurmctldHost={NODE}(127.0.0.1)",
            "SlurmUser=root",
            "SlurmdUser=root",
            "SlurmctldPort=6817",
            "SlurmdPort=6818",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "CredType=cred/munge",
            f"StateSaveLocation={w / 'state' / 'ctld'}",
            f"SlurmdSpoolDir={w / 'state' / 'slurmd'}",
            f"SlurmctldPidFile={w / 'state' / 'slurmctld.pid'}",
            f"SlurmdPidFile={w / 'state' / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.log('slurmctld')}",
            f"SlurmdLogFile={self.log('slurmd')}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            f"PlugStackConfig={plugstack}",
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
            # Short timers: a test cluster must notice a dead node or step quickly.
            "SlurmdTimeout=30",
            "InactiveLimit=0",
            "KillWait=5",
            "MinJobAge=600",
            "MessageTimeout=10",
            f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def _start_slurmctld(self, deadline: float) -> None:
        """The controller, clean start (``-c``: no state from an earlier run), answering ``scontrol ping``."""
        self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.conf)])

        def up() -> bool:
            ping = self.run("scontrol", "ping", check=False, timeout_s=10)
            return ping.returncode == 0 and "UP" in ping.stdout

        self._await("slurmctld", up, deadline, "to answer `scontrol ping`")

    def _start_slurmd(self, deadline: float) -> None:
        """The node daemon under the configured node name, then wait for the node to be idle."""
        self._spawn("slurmd", ["slurmd", "-D", "-N", NODE, "-f", str(self.conf)])

        def idle() -> bool:
            state = self.run("sinfo", "-h", "-n", NODE, "-o", "%T", check=False, timeout_s=10).stdout.strip()
            return state == "idle"

        self._await("slurmd", idle, deadline, f"to bring node {NODE} to idle")

    def _await(self, name: str, ready: Callable[[], bool], deadline: float, what: str) -> None:
        """Poll ``ready`` until the deadline; fail at once if any daemon died meanwhile."""
        while True:
            for dname, proc in self._procs.items():
                if proc.poll() is not None:
                    raise SlurmUnavailable(
                        f"LocalSlurm: {dname} exited with {proc.returncode} while waiting for {name} {what}; "
                        f"log: {self.log(dname)} ({_tail(self.log(dname)) or _tail(self.log_dir / f'{dname}.out')})"
                    )
            with contextlib.suppress(subprocess.TimeoutExpired):
                if ready():
                    return
            if time.monotonic() >= deadline:
                extra = ""
                if name == "slurmd":
                    node = self.run("scontrol", "-o", "show", "node", NODE, check=False, timeout_s=10).stdout
                    extra = " ".join(re.findall(r"\b(?:State|Reason)=\S+", node))
                raise SlurmUnavailable(
                    f"LocalSlurm: timed out after {START_DEADLINE_S:g} s waiting for {name} {what} {extra}; "
                    f"log: {self.log(name)} ({_tail(self.log(name))})"
                )
            time.sleep(0.2)


_SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"])


def _wait_until(ready: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``ready`` every 0.2 s for up to ``timeout_s``; whether it came true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(0.2)
    return False


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
