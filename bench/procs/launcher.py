"""The local launcher: a run's process infrastructure and one trial's processes.

:class:`ProcessHost` lives for a whole run: it marks the run (``FTBENCH_RUN``), starts
the guard, and owns the forkserver that ranks are forked from. :class:`LocalLauncher`
lives for one trial: it starts the c10d store in a process of its own (so a rank's death
never takes the rendezvous with it, and the store can itself be a fault target), starts
rank processes, and reports their exits as they happen.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Protocol

from bench.procs.events import EventWriter
from bench.procs.guard import MODULE as GUARD_MODULE
from bench.procs.hygiene import MARKER, redirect_output, set_pdeathsig, sweep
from injectors import undo


class LaunchError(RuntimeError):
    """The launcher could not bring up a trial's processes."""


class ProcessHost:
    """Run-wide: marker, guard and forkserver. Use as a context manager."""

    def __init__(self) -> None:
        self.run_id = uuid.uuid4().hex[:16]
        # multiprocessing's resource tracker serves the harness process for its whole life
        # (it exits with it): started before the marker, it is not one of the run's.
        multiprocessing.resource_tracker.ensure_running()
        # A host made inside another's life (a CLI run or calibration inside a test
        # session) marks its own processes and hands the outer run its marker back.
        self._outer_marker = os.environ.get(MARKER)
        os.environ[MARKER] = self.run_id
        undo.claim(self.run_id, os.getpid())  # the run is live while this process is
        self.guard = subprocess.Popen(
            [sys.executable, "-m", GUARD_MODULE, self.run_id, str(os.getpid())],
            stdin=subprocess.PIPE,
            start_new_session=True,
        )
        self._contexts: dict[str, ForkServerContext | SpawnContext] = {}

    def context(self, start_method: str, preload: tuple[str, ...] = ()) -> ForkServerContext | SpawnContext:
        """The multiprocessing context for ranks (the forkserver starts on first use)."""
        return rank_context(start_method, self._contexts, preload)

    def infrastructure(self) -> set[int]:
        """Pids that outlive trials: the guard and the forkserver."""
        pids = {self.guard.pid}
        fs_pid = forkserver_pid()
        if "forkserver" in self._contexts and fs_pid:
            pids.add(fs_pid)
        return pids

    def sweep_trial(self) -> list[int]:
        """Kill whatever a trial left behind (re-parented orphans included)."""
        return sweep(self.run_id, keep=self.infrastructure())

    def close(self) -> None:
        sweep(self.run_id, keep={self.guard.pid})
        self._contexts.clear()
        if self.guard.stdin is not None:
            self.guard.stdin.close()
        try:
            self.guard.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.guard.kill()
        if self._outer_marker is None:
            os.environ.pop(MARKER, None)
        else:
            os.environ[MARKER] = self._outer_marker

    def __enter__(self) -> ProcessHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RankHost(Protocol):
    """What a :class:`LocalLauncher` needs of the process that owns it: the harness's
    :class:`ProcessHost`, or a host agent (:mod:`bench.hosts.agent`) on another host."""

    def context(self, start_method: str, preload: tuple[str, ...] = ()) -> ForkServerContext | SpawnContext: ...

    def sweep_trial(self) -> list[int]: ...


def forkserver_pid() -> int | None:
    """This process's multiprocessing forkserver, if it started one (it outlives trials)."""
    pid: int | None = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
    return pid


def rank_context(
    start_method: str, cache: dict[str, ForkServerContext | SpawnContext], preload: tuple[str, ...] = ()
) -> ForkServerContext | SpawnContext:
    """The multiprocessing context ranks are started from: spawn, or the forkserver
    (``forkserver-private`` ranks too), which imported torch, ftbench's rank layer and
    ``preload`` (:func:`bench.jobs.job.zygote_preload`). A forkserver that preloaded
    other modules is replaced: a forkserver-private rank must carry no module its own
    code would not import, or it would own more memory than a fresh one."""
    if start_method.startswith("forkserver"):
        fs = cache.get("forkserver")
        if not isinstance(fs, ForkServerContext):
            fs = cache["forkserver"] = multiprocessing.get_context("forkserver")
        server: Any = multiprocessing.forkserver._forkserver  # its preload is not public
        wanted = ["bench.rank.zygote", *preload]
        if server._preload_modules != wanted:
            server._stop()  # none of its ranks is left: trials run one at a time
            fs.set_forkserver_preload(wanted)
        multiprocessing.forkserver.ensure_running()
        return fs
    spawn = cache.get("spawn")
    if not isinstance(spawn, SpawnContext):
        spawn = cache["spawn"] = multiprocessing.get_context("spawn")
    return spawn


def store_main(port_file: str, events_dir: str, namespace: str, address: str, sock: socket.socket) -> None:
    """Body of the store process: host a c10d TCPStore on ``sock`` (listening on
    ``address``, made by the harness) until killed."""
    set_pdeathsig()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # c10d logs a warning per client it cannot name (clients in network namespaces).
    redirect_output(Path(events_dir) / "store.log")
    if namespace:
        from injectors.link.netns import enter

        enter(namespace)
    from bench.procs.store import bound_store

    store = bound_store(address, timeout_s=3600, sock=sock)
    EventWriter(Path(events_dir) / f"store-{os.getpid()}.jsonl", src="store", pid=os.getpid()).emit(
        "proc_start", role="store", port=store.port
    )
    publish(port_file, str(store.port))
    while True:
        signal.pause()


def publish(path: str, text: str) -> None:
    """Hand a value (a port, an address) to the parent: written whole, then renamed, so
    the parent never reads half of it (see :meth:`LocalLauncher.await_file`)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.rename(tmp, path)


@dataclass
class RankProcess:
    rank: int
    process: BaseProcess | None
    """None for a rank on another host (started by its host agent)."""
    exitcode: int | None = None
    recorded: bool = False
    """Its exit was already recorded, stamped on its own host's clock (by a host agent)."""


@dataclass
class LocalLauncher:
    """One trial's store and rank processes on this host."""

    host: RankHost
    start_method: str
    trial_dir: Path
    events_dir: Path
    preload: tuple[str, ...] = ()
    """What the forkserver imports for these ranks (:func:`bench.jobs.job.zygote_preload`)."""
    ranks: list[RankProcess] = field(default_factory=list)
    namespace: str = ""
    """The network namespace the store lives in ("": the harness's)."""
    address: str = "127.0.0.1"
    """Where the store listens, and where the harness's own client reaches it."""
    store_process: BaseProcess | None = None
    store_port: int = 0
    store_serves: bool = False
    """The store process has published its port: it serves (:meth:`await_store`)."""

    def __post_init__(self) -> None:
        self.ctx = self.host.context(self.start_method, self.preload)

    def start_store(self, timeout_s: float = 60.0, *, wait: bool = True) -> int:
        """Start the store process; its port. The harness binds the store's socket (in
        the store's namespace) and hands it over, so the port is known at once and
        ranks may start while the store process is still importing torch: their
        connections wait in the socket's backlog. ``wait=False`` returns before the
        store serves (:meth:`await_store` then)."""
        from bench.procs.store import listening_socket

        self.store_ready_file.unlink(missing_ok=True)
        self.store_serves = False
        if self.namespace:
            from injectors.link.netns import run_in

            sock = run_in(self.namespace, listening_socket, self.address)
        else:
            sock = listening_socket(self.address)
        with sock:  # the store process has its own copy once started
            self.store_port = int(sock.getsockname()[1])
            self.store_process = self.ctx.Process(
                target=store_main,
                args=(str(self.store_ready_file), str(self.events_dir), self.namespace, self.address, sock),
                name="ftbench-store",
                daemon=False,
            )
            self.store_process.start()
        if wait:
            self.await_store(timeout_s)
        return self.store_port

    @property
    def store_ready_file(self) -> Path:
        """Where the store process publishes its port once it serves."""
        return self.trial_dir / "store.port"

    def await_store(self, timeout_s: float = 60.0) -> None:
        """Until the store serves (it has published its port), or a :class:`LaunchError`."""
        assert self.store_process is not None, "start_store first"
        if self.store_serves:
            return
        port = int(self.await_file(self.store_process, self.store_ready_file, "the store", timeout_s))
        if port != self.store_port:
            raise LaunchError(f"the store serves port {port}, not the {self.store_port} it was given")
        self.store_serves = True

    @staticmethod
    def await_file(process: BaseProcess, path: Path, what: str, timeout_s: float) -> str:
        """Wait for ``process`` to :func:`publish` ``path``; its text (the file is removed)."""
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            if not process.is_alive():
                raise LaunchError(f"{what} exited with code {process.exitcode}")
            if time.monotonic() > deadline:
                raise LaunchError(f"{what} did not start within {timeout_s:.0f} s")
            time.sleep(0.005)
        text = path.read_text().strip()
        path.unlink()
        return text

    def store_client(self) -> Any:
        """The harness's own connection to the trial's store (the supervisor's). In a
        private network namespace it is made by a thread that entered it: a socket
        belongs to the namespace it was created in, and works from any thread after."""
        import datetime

        import torch.distributed as dist

        def connect() -> Any:
            client = dist.TCPStore(self.address, self.store_port, None, False, timeout=datetime.timedelta(seconds=30))
            return dist.PrefixStore("ftb", client)

        if not self.namespace:
            return connect()
        from injectors.link.netns import run_in

        return run_in(self.namespace, connect)

    def start_rank(self, rank: int, target: Callable[..., None], *args: object) -> RankProcess:
        process = self.ctx.Process(target=target, args=args, name=f"ftbench-rank{rank}", daemon=False)
        process.start()
        rp = RankProcess(rank=rank, process=process)
        self.ranks.append(rp)
        return rp

    def running(self) -> list[RankProcess]:
        return [r for r in self.ranks if r.exitcode is None]

    def kill_rank(self, r: RankProcess) -> None:
        """SIGKILL a rank the job has no more use for (its exit is reaped as any other)."""
        if r.process is not None:
            r.process.kill()

    def wait(self, timeout_s: float) -> list[RankProcess]:
        """Block up to ``timeout_s`` for rank exits; return the ranks that just exited."""
        live = self.running()
        if not live:
            return []
        procs = [(r, r.process) for r in live if r.process is not None]
        ready = multiprocessing.connection.wait([p.sentinel for _, p in procs], timeout=timeout_s)
        exited = []
        for r, p in procs:
            if p.sentinel in ready:
                p.join()
                r.exitcode = p.exitcode
                exited.append(r)
        return exited

    def close(self) -> None:
        """Kill everything of the trial and reap it."""
        self.host.sweep_trial()
        for proc in [r.process for r in self.ranks if r.process] + ([self.store_process] if self.store_process else []):
            proc.join(timeout=10)
            if proc.exitcode is None:
                proc.kill()
                proc.join(timeout=10)
