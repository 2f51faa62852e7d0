"""ftbench's probe: how ftbench sees inside a training job it did not write.

ftbench puts this file's folder first on the job's ``PYTHONPATH`` with the
``sitecustomize`` beside it, and names an events folder in ``FTBENCH_PROBE_DIR``; every
Python process of the job (a launcher's agent, its workers, their restarts) then runs
:func:`start` before the job's own code, which imports nothing of ftbench. The probe
uses only what Python and torch expose to anyone, and puts its hooks in as the job
imports the modules they belong to (:mod:`ftbench_probe_imports`; nothing heavy is
imported on its account):

- ``step_end``: torch's global optimizer step hook (``register_optimizer_step_post_hook``),
  once per step of the first optimizer that steps in the process; ``count`` is the
  process's own count, ``step`` the job's step where the optimizer's state says it
  (Adam's ``step``), else the count (the harness aligns it with the job's progress
  lines afterwards);
- ``raised``: an exception out of ``torch.autograd.backward`` or one of
  ``torch.distributed``'s collectives, recorded and re-raised untouched, stamped where it
  leaves torch (an uncaught one is recorded by ``sys.excepthook`` if nothing saw it
  first); the harness names a collective failure among them a ``detect``;
- ``pg_ready`` (and ``reconfigured`` for a later generation): ``init_process_group``
  returned; ``pg_destroyed``;
- the elastic agents of torchrun and NVRx's ``ft_launcher``: four lifecycle methods of
  the agent wrapped with events, their behaviour unchanged
  (:mod:`ftbench_probe_agents`, which ftbench's own restart strategies use too);
- ``model_wrapped`` (DDP's or FSDP's construction returned) and ``restore_start`` /
  ``restore_end`` (around ``torch.load`` and DCP's load), with the generation they
  belong to: what a restarted job does between its new process group and its first
  step (:mod:`ftbench_probe_phases`);
- torchft's Manager: each quorum it joins and each commit vote
  (:mod:`ftbench_probe_torchft`);
- ``proc_start`` and ``proc_exit`` (atexit) of every rank process, which is the process
  whose environment says ``RANK`` (a child of a rank that inherits its ``RANK``, such as
  a data-loader worker, is not one).

Events are ftbench's format: one JSON object per line, one ``write(2)`` each, in a file
of the process's own. Anything that goes wrong inside the probe turns the probe off,
never the job.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType, TracebackType
from typing import Any

# The modules beside this one: top-level names in a job's interpreter, where this folder
# is on PYTHONPATH; the package's in the harness, which imports the probe from bench/.
if __package__:
    from . import ftbench_probe_agents as agents
    from . import ftbench_probe_imports as imports
    from . import ftbench_probe_phases as phases
    from . import ftbench_probe_torchft as manager_watch
else:
    import ftbench_probe_agents as agents  # type: ignore[import-not-found, no-redef]
    import ftbench_probe_imports as imports  # type: ignore[import-not-found, no-redef]
    import ftbench_probe_phases as phases  # type: ignore[import-not-found, no-redef]
    import ftbench_probe_torchft as manager_watch  # type: ignore[import-not-found, no-redef]

DIR_ENV = "FTBENCH_PROBE_DIR"
"""The events folder; the probe does nothing where it is unset."""
RANK_BASE_ENV = "FTBENCH_PROBE_RANK_BASE"
"""Added to the ``RANK`` a process carries: the job's rank where several launchers each
count their ranks from 0 (torchft's replica groups, one torchrun each)."""
OWNER_ENV = "FTBENCH_PROBE_OWNER"
"""``RANK:PID`` of the rank process a child inherited its environment from: a child with
the same ``RANK`` is that rank's helper, not the rank."""
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "broadcast_object_list",
    "barrier",
    "all_to_all",
    "all_to_all_single",
    "reduce",
    "gather",
    "scatter",
    "send",
    "recv",
)
"""``torch.distributed`` calls whose exceptions the probe records (a job's own
collectives; DDP's and FSDP's come out of ``backward``)."""

Emit = agents.Emit


class Probe:
    """The probe of one process."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.pid = os.getpid()
        env = os.environ
        found, base = env.get("RANK", ""), env.get(RANK_BASE_ENV, "0")
        rank = str(int(found) + int(base)) if found.isdigit() and base.isdigit() else ""
        owner = env.get(OWNER_ENV, "")
        self.rank: int | None = int(rank) if rank and not owner.startswith(f"{rank}:") else None
        self.src = "rank" if self.rank is not None else "proc"
        self.restarts = int(env.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        self.world_size = int(env.get("WORLD_SIZE", "0") or 0)
        self.gen = self.restarts
        self.pg_inits = 0
        self.count = 0
        self.offset: int | None = None
        """The job's step minus the count, where the optimizer's state tells it."""
        self.clock: int | None = None
        """id() of the optimizer whose steps are the job's steps."""
        self.last_t = time.monotonic_ns()
        self.spent_ns = 0
        """Time spent in the step hook, its own timing included: what the probe costs
        the job per step, measured in place (reported at exit)."""
        self._fd = -1
        self._base = ""
        if self.rank is not None:
            os.environ[OWNER_ENV] = f"{self.rank}:{self.pid}"

    # -- writing --------------------------------------------------------------------

    def _open(self) -> None:
        name = f"probe-{self.src}{'' if self.rank is None else self.rank}-{self.pid}.jsonl"
        self._fd = os.open(os.path.join(self.directory, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        base: dict[str, Any] = {"src": self.src, "pid": self.pid}
        if self.rank is not None:
            base["rank"] = self.rank
        self._base = ", " + json.dumps(base)[1:-1]

    def emit(self, event: str, *, t: int | None = None, **fields: Any) -> int:
        t = time.monotonic_ns() if t is None else t
        if self._fd < 0:
            self._open()
        extra = ", " + json.dumps(fields, default=str)[1:-1] if fields else ""
        line = f'{{"t": {t}, "wall": {time.time_ns()}, "event": "{event}"{self._base}{extra}}}\n'
        os.write(self._fd, line.encode())
        return t

    # -- what the job does --------------------------------------------------------

    def started(self) -> None:
        if self.rank is None:
            return
        env = os.environ
        self.emit(
            "proc_start",
            role="replacement" if self.restarts else "initial",
            restart_count=self.restarts,
            local_rank=env.get("LOCAL_RANK"),
            group_rank=env.get("GROUP_RANK"),
            world_size=self.world_size,
            argv=sys.argv[:8],
        )
        atexit.register(self._exiting)

    def _exiting(self) -> None:
        self.emit("proc_exit", exitcode=None, how="atexit", steps=self.count, probe_s=self.spent_ns / 1e9)

    def after_step(self, optimizer: Any, _args: Any, _kwargs: Any) -> None:
        """The global optimizer step hook: one ``step_end`` per step of the clock."""
        entered = time.perf_counter_ns()
        if self.clock is None:
            self.clock = id(optimizer)
            self.offset = _state_step(optimizer)
        elif id(optimizer) != self.clock:
            return
        t = time.monotonic_ns()
        self.count += 1
        count = self.count
        # A step's time is the time since the previous one ended; the first step of a
        # process has none (what came before it is start-up, not a step).
        step_s = (t - self.last_t) / 1e9 if count > 1 else 0.0
        step = count if self.offset is None else count + self.offset
        if self._fd < 0:
            self._open()
        line = (
            f'{{"t": {t}, "wall": {time.time_ns()}, "event": "step_end"{self._base}, "step": {step}, '
            f'"count": {count}, "gen": {self.gen}, "world_size": {self.world_size}, '
            f'"step_s": {step_s!r}}}\n'
        )
        os.write(self._fd, line.encode())
        self.last_t = t
        self.spent_ns += time.perf_counter_ns() - entered

    def raised(self, exc: BaseException, site: str) -> None:
        """An exception left torch here: recorded once, wherever it is seen first."""
        try:
            if getattr(exc, "_ftbench_seen", False):
                return
            exc._ftbench_seen = True  # type: ignore[attr-defined]
        except Exception:  # an exception type that takes no attributes: record it anyway
            pass
        t = time.monotonic_ns()
        self.emit(
            "raised",
            t=t,
            site=site,
            type=type(exc).__name__,
            error=str(exc)[:300],
            step=self.count if self.offset is None else self.count + self.offset,
            gen=self.gen,
        )

    def pg_ready(self, backend: str, world_size: int) -> None:
        self.pg_inits += 1
        self.gen = self.restarts + self.pg_inits - 1
        self.world_size = world_size or self.world_size
        self.last_t = self.emit("pg_ready", gen=self.gen, world_size=self.world_size, backend=backend)
        if self.gen > 0:
            self.emit("reconfigured", gen=self.gen, world_size=self.world_size)


PROBE: Probe | None = None


def _state_step(optimizer: Any) -> int | None:
    """The steps an optimizer has taken before this one, where its state counts them
    (Adam's ``step``), so that a resumed job's steps are the job's own."""
    try:
        for state in optimizer.state.values():
            if "step" in state:
                return int(float(state["step"])) - 1
    except Exception:
        pass
    return None


def _guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a hook of the probe; a failure turns the probe off, never the job."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        global PROBE
        if PROBE is None:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            try:
                PROBE.emit("probe_off", error=f"{type(err).__name__}: {err}"[:300])
            except Exception:
                pass
            PROBE = None
            return None

    return run


def watch_raises(module: Any, name: str, site: str) -> None:
    """Record an exception that leaves ``module.name``, then let it go on unchanged."""
    original = getattr(module, name, None)
    if original is None or getattr(original, "_ftbench_wrapped", False):
        return

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except BaseException as exc:
            if PROBE is not None:
                _guarded(PROBE.raised)(exc, site)
            raise

    call._ftbench_wrapped = True  # type: ignore[attr-defined]
    setattr(module, name, call)


def watch_after(module: Any, name: str, then: Callable[[Any, tuple[Any, ...], dict[str, Any]], None]) -> None:
    """Call ``then(result, args, kwargs)`` after ``module.name`` returns."""
    original = getattr(module, name, None)
    if original is None or getattr(original, "_ftbench_wrapped", False):
        return

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        _guarded(then)(result, args, kwargs)
        return result

    call._ftbench_wrapped = True  # type: ignore[attr-defined]
    setattr(module, name, call)


# -- hooks, put in as the job imports their modules -----------------------------------


def _on_torch(_module: ModuleType) -> None:
    if PROBE is not None and PROBE.rank is not None:
        PROBE.emit("import_done")


def _on_optimizer(module: ModuleType) -> None:
    if PROBE is not None:
        module.register_optimizer_step_post_hook(_guarded(PROBE.after_step))


def _on_autograd(module: ModuleType) -> None:
    watch_raises(module, "backward", "backward")


def _on_c10d(module: ModuleType) -> None:
    def ready(_result: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if PROBE is not None:
            backend = str(kwargs.get("backend", args[0] if args else "") or module.get_backend())
            PROBE.pg_ready(backend, module.get_world_size())

    def destroyed(_result: Any, _args: tuple[Any, ...], _kwargs: dict[str, Any]) -> None:
        if PROBE is not None:
            PROBE.emit("pg_destroyed")

    watch_after(module, "init_process_group", ready)
    watch_after(module, "destroy_process_group", destroyed)
    dist = sys.modules.get("torch.distributed")
    for name in COLLECTIVES:
        watch_raises(module, name, name)
        if dist is not None and getattr(dist, name, None) is not None:
            setattr(dist, name, getattr(module, name))


def _on_dist(module: ModuleType) -> None:
    """``torch.distributed`` re-exports c10d's functions: point it at the watched ones."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None:
        return
    for name in ("init_process_group", "destroy_process_group", *COLLECTIVES):
        if getattr(module, name, None) is not None and getattr(c10d, name, None) is not None:
            setattr(module, name, getattr(c10d, name))


def _agent_emit() -> Emit:
    """Events of an elastic agent (``src = agent``), in a file of its own."""
    assert PROBE is not None
    PROBE.src = "agent"
    return PROBE.emit


def _on_torch_agent(module: ModuleType) -> None:
    from torch.distributed.elastic.agent.server.api import WorkerState

    agents.instrument_agent(module.LocalElasticAgent, _agent_emit(), (WorkerState.FAILED, WorkerState.UNHEALTHY))


def _on_nvrx_agent(module: ModuleType) -> None:
    from nvidia_resiliency_ext.fault_tolerance._torch_elastic_compat.agent.server.api import WorkerState

    agents.instrument_agent(module.LocalElasticAgent, _agent_emit(), (WorkerState.FAILED, WorkerState.UNHEALTHY))


def _phase_event(event: str, **fields: Any) -> None:
    """An event of a rank's build or restore (:mod:`ftbench_probe_phases`), stamped with
    the generation it belongs to."""
    if PROBE is not None and PROBE.rank is not None:
        PROBE.emit(event, gen=PROBE.gen, **fields)


def _phase_hook(hook: Callable[[ModuleType, Emit], None]) -> Callable[[ModuleType], None]:
    return lambda module: hook(module, _guarded(_phase_event))


def _on_torchft(module: ModuleType) -> None:
    def emit(event: str, **fields: Any) -> None:
        if PROBE is not None:
            PROBE.emit(event, **fields)

    def raised(exc: BaseException, site: str) -> None:
        if PROBE is not None:
            PROBE.raised(exc, site)

    manager_watch.watch_manager(module.Manager, _guarded(emit), _guarded(raised), watch_after)


HOOKS: dict[str, Callable[[ModuleType], None]] = {
    "torch": _on_torch,
    "torch.optim.optimizer": _on_optimizer,
    "torch.autograd": _on_autograd,
    "torch.distributed.distributed_c10d": _on_c10d,
    "torch.distributed": _on_dist,
    "torch.distributed.elastic.agent.server.local_elastic_agent": _on_torch_agent,
    "nvidia_resiliency_ext.fault_tolerance.launcher": _on_nvrx_agent,
    "torchft.manager": _on_torchft,
    **{name: _phase_hook(hook) for name, hook in phases.HOOKS.items()},
}


def _excepthook(
    previous: Callable[[type[BaseException], BaseException, TracebackType | None], Any],
) -> Callable[[type[BaseException], BaseException, TracebackType | None], Any]:
    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> Any:
        if PROBE is not None:
            _guarded(PROBE.raised)(exc, "uncaught")
        return previous(kind, exc, tb)

    return hook


def _thread_hook(previous: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def hook(args: Any) -> Any:
        if PROBE is not None and args.exc_value is not None:
            _guarded(PROBE.raised)(args.exc_value, "uncaught_thread")
        return previous(args)

    return hook


def _forked() -> None:
    """A child forked from a probed process (a data-loader worker) is not its parent."""
    global PROBE
    PROBE = None


def start() -> None:
    """Called by ``sitecustomize`` at the interpreter's start-up."""
    global PROBE
    directory = os.environ.get(DIR_ENV)
    if not directory or PROBE is not None:
        return
    try:
        PROBE = Probe(directory)
        PROBE.started()
        guarded = {name: _guarded(hook) for name, hook in HOOKS.items()}
        sys.meta_path.insert(0, imports.HookFinder(guarded, lambda: PROBE is not None))
        sys.excepthook = _excepthook(sys.excepthook)
        threading.excepthook = _thread_hook(threading.excepthook)
        os.register_at_fork(after_in_child=_forked)
        for name, hook in guarded.items():  # already imported (rare at start-up): hook them now
            module = sys.modules.get(name)
            if module is not None:
                hook(module)
    except Exception:
        PROBE = None
