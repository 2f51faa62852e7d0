"""Starting the local Slurm cluster: its network, the holders of each host's namespaces,
munged, slurm.conf, slurmctld and the wait for idle nodes (tools/slurm/localslurm.py says
why each step is done the way it is). Standard library only."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from slurmconf import (
    CONTROLLER,
    CONTROLLER_ADDRESS,
    NETNS_DIR,
    PARTITION,
    REQUIRED_BINARIES,
    START_DEADLINE_S,
    SlurmUnavailable,
)
from slurmprocs import SEARCH_PATH, tail


class StartUp:
    """The start-up steps of :class:`slurmcluster.LocalSlurm`, which mixes them in; they
    work on its state (declared here) and its helpers for names and clients."""

    workdir: Path
    nodes: tuple[str, ...]
    hosts: tuple[str, ...]
    cpus: int
    settings: dict[str, str]
    conf: Path
    log_dir: Path
    munge_socket: Path
    holders: dict[str, int]
    daemons: dict[str, int]
    _procs: dict[str, subprocess.Popen[bytes]]
    _ns_idents: dict[str, tuple[int, int]]
    _bin: dict[str, str]

    def netns(self, role: str) -> str: ...
    def address(self, host: str) -> str: ...
    def port(self, host: str) -> str: ...
    def log(self, daemon: str) -> Path: ...
    def _exe(self, name: str) -> str: ...
    def in_namespace(self, *argv: str, host: str = CONTROLLER, cwd: Path | None = None) -> list[str]: ...
    def client_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]: ...
    def run(self, *argv: str, **kw: Any) -> subprocess.CompletedProcess[str]: ...
    def show(self, kind: str, name: str) -> dict[str, str]: ...

    def _find_binaries(self) -> None:
        found = {b: shutil.which(b, path=SEARCH_PATH) for b in REQUIRED_BINARIES}
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
                        f"log: {log} ({tail(log) or tail(self.log_dir / f'{dname}.out')})"
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
