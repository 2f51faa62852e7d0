"""Entry point of every rank process, whatever launched it.

The first event (``proc_start``, with the pid) is written before torch is imported, so
the harness can target a rank the moment it exists and the import time is visible.

Exit codes of a rank: 0 finished, 1 failed (the strategy gave up), 3 crashed (an
exception escaped; its traceback is in the event log), 4 left the job cleanly (left out
of the next generation, or stopped because the job is over without it); a supervisor
does not count 0 or 4 as a fault.

A rank ends with ``os._exit``, running no destructor (a gloo group's may wait on a dead
peer), unless its strategy lets a failure end it as a plain script ends
(:class:`EndedByError`): then the error goes to ``sys.excepthook`` and the interpreter
exits the usual way, which is part of what its peers see.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.procs.events import EventWriter
from bench.procs.hygiene import redirect_output, set_pdeathsig
from bench.scenario.registry import load_path
from injectors.cgroup import join

if TYPE_CHECKING:
    import torch

    from bench.rank.comm import Hook
    from bench.scenario.model import RecoverySpec, WorkloadSpec

EXIT_OK, EXIT_FAILED, EXIT_CRASHED, EXIT_LEFT = 0, 1, 3, 4


class EndedByError(Exception):
    """A failed step's error, let through to end the rank as it ends a user's script
    (:data:`bench.rank.policy.RAISE`); its detection is already recorded."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True, kw_only=True, slots=True)
class HookSpec:
    """A rank-side fault hook to install: armed by the signal of fault ``index``."""

    index: int
    kind: str
    impl: str
    """``module:Class`` of the hook (:mod:`injectors.rankside`)."""
    params: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class RankSpec:
    """Everything a rank needs, picklable (sent through the forkserver or a file).

    Plug-in code is named by ``module:attribute`` paths resolved by the harness, so a
    rank imports exactly what it runs and never looks anything up in a registry.
    """

    rank: int
    """Stable id (launch rank)."""
    members: tuple[int, ...]
    """Ids of the world the rank joins."""
    store_port: int = 0
    """The launcher's store (0: the world comes from torchrun's ``env://``)."""
    store_host: str = "127.0.0.1"
    store_prefix: str = "ftb"
    events_dir: str
    entry: str
    """``module:function(spec, events) -> exit code``: the strategy's rank main."""
    policy: str = ""
    """``module:Class`` of the strategy's :class:`~bench.rank.policy.RankPolicy`, for
    ranks that run the shared loop (:func:`bench.rank.loop.train`)."""
    workload: WorkloadSpec
    """The point's workload; its implementation is ``workload_impl``."""
    workload_impl: str
    recovery: RecoverySpec
    """The point's strategy and its knobs."""
    backend: str
    """Resolved backend (``gloo`` or ``nccl``)."""
    seed: int
    wait_s: float
    """Upper bound of any wait of the rank (the trial deadline)."""
    role: str = "initial"
    hooks: tuple[HookSpec, ...] = ()
    """Rank-side fault hooks (none in a fault-free reference trial)."""
    interpose: bool = False
    """Put the thin fault interposer in the collective path even without rank-side
    faults (``launch.interposer = "always"``: to measure what it costs)."""
    checkpoint_dir: str = ""
    """Where a strategy that checkpoints to disk keeps its checkpoint (the trial's directory)."""
    memory_cgroup: str = ""
    """The trial's parent memory cgroup, where an ``oom`` fault may hit: the rank joins a
    group of its own under it before it imports torch ("" for other trials)."""
    netns: str = ""
    """Network namespace of the rank's host (entered before any socket exists)."""
    ifname: str = "lo"
    """The interface gloo uses (``GLOO_SOCKET_IFNAME``): loopback on one host, so that
    its listening sockets are reachable from this host only; ``eth0`` for namespaced hosts;
    "" on a cluster's hosts (the host's own setting, else gloo's choice by host name)."""
    env: dict[str, str] = field(default_factory=dict)
    """Set in the rank's environment before anything else runs (``launch.nccl``)."""
    private_memory: bool = False
    """Forked from the forkserver (``launch.start_method = "forkserver-private"``): make
    the memory shared with it the rank's own first (:mod:`bench.rank.private`)."""
    pdeathsig: bool = True
    """Die with the parent. Off for torchrun's workers: whether they outlive a dead agent
    is part of the behaviour under test (the guard still sweeps them)."""


def main(spec: RankSpec) -> None:
    if spec.pdeathsig:
        set_pdeathsig()
    # c10d and gloo warnings, a crash's traceback: beside the event log, off the console.
    redirect_output(Path(spec.events_dir) / f"rank{spec.rank}-{os.getpid()}.log")
    if spec.netns:
        from injectors.link.netns import enter

        enter(spec.netns)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", spec.ifname)
    if spec.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = spec.ifname
    os.environ.update(spec.env)
    # As torchrun does for its workers: one OpenMP thread per rank unless the user said
    # otherwise (idle OpenMP threads spin, and ranks share the cores).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    events = EventWriter(
        Path(spec.events_dir) / f"rank{spec.rank}-{os.getpid()}.jsonl", src="rank", rank=spec.rank, pid=os.getpid()
    )
    # Before torch: what the rank allocates from here on is charged to its own group.
    group = join(spec.memory_cgroup, spec.rank) if spec.memory_cgroup else None
    extra: dict[str, Any] = {"memory_cgroup": str(group)} if group else {}
    events.emit("proc_start", role=spec.role, **extra)
    if spec.private_memory:  # charged to the rank's own memory group, as a fresh import's
        from bench.rank.private import make_private

        events.emit("memory_private", **asdict(make_private(os.getppid())))
    code, ended_by = EXIT_CRASHED, None
    try:
        entry = load_path(spec.entry)
        events.emit("import_done")
        code = int(entry(spec, events))
    except EndedByError as end:
        code, ended_by = EXIT_FAILED, end.error
    except BaseException as err:  # the record matters more than the exception type
        events.emit("crash", error=f"{type(err).__name__}: {err}"[:500], traceback=traceback.format_exc()[-2000:])
    finally:
        events.emit("proc_exit", exitcode=code)
        events.close()
    if ended_by is not None:
        _end_as_script(ended_by)
    os._exit(code)


def _end_as_script(error: BaseException) -> None:
    """End the process as an uncaught ``error`` ends a script: the excepthook (torch's,
    once a process group exists, prefixes each line with the rank) prints it, the error
    is kept in ``sys.last_*`` (as the interpreter keeps it, so the training code's
    frames, and its model and process group, live until the interpreter tears ``sys``
    down), and the interpreter exits with status 1, running atexit and tearing its
    objects down."""
    sys.last_type, sys.last_value, sys.last_traceback = type(error), error, error.__traceback__
    sys.excepthook(type(error), error, error.__traceback__)
    sys.exit(EXIT_FAILED)


def store_client(spec: RankSpec) -> Any:
    """A rank's connection to the launcher's store (torch is imported here, not above:
    this module runs before the rank imports torch)."""
    import datetime

    import torch.distributed as dist

    return dist.PrefixStore(
        spec.store_prefix,
        dist.TCPStore(spec.store_host, spec.store_port, None, False, timeout=datetime.timedelta(seconds=spec.wait_s)),
    )


def device(spec: RankSpec, events: EventWriter | None = None) -> torch.device:
    """The rank's device: CUDA with NCCL or with ``workload.device = "cuda"`` (its own GPU
    under NCCL, by ``LOCAL_RANK`` under torchrun; ranks on gloo may share one), else CPU.

    On CUDA the context is made here rather than by the first kernel, and stamped
    (``cuda_ready``, with the seconds it took): a restarted worker's CUDA start-up is a
    recovery phase of its own, not hidden in building the model."""
    import time

    import torch

    if spec.backend != "nccl" and spec.workload.device != "cuda":
        return torch.device("cpu")
    start = time.perf_counter()
    index = int(os.environ.get("LOCAL_RANK", spec.rank)) % torch.cuda.device_count()
    torch.cuda.set_device(index)
    dev = torch.device("cuda", index)
    torch.empty(1, device=dev)  # the primary context exists once a first allocation is made
    torch.cuda.synchronize(dev)
    if events is not None:
        events.emit("cuda_ready", device=index, cuda_init_s=time.perf_counter() - start)
    return dev


def install_hooks(spec: RankSpec, events: EventWriter) -> Sequence[Hook]:
    """The spec's rank-side fault hooks, armed by their real-time signals."""
    from injectors.rankside import install

    hooks = []
    for h in spec.hooks:

        def emit(event: str, _h: HookSpec = h, **fields: Any) -> None:
            events.emit(event, fault=_h.index, kind=_h.kind, ranks=[spec.rank], **fields)

        hook = load_path(h.impl)(emit=emit, seed=spec.seed * 7919 + spec.rank * 31 + h.index, **h.params)
        hooks.append((h.index, hook))
    install(hooks)
    return [hook for _, hook in hooks]


def spec_to_json(spec: RankSpec) -> str:
    """The spec as JSON, for ranks that another launcher starts (torchrun's workers)."""
    from bench.scenario.config import to_dict

    return json.dumps(to_dict(spec))


def spec_from_json(text: str, *, file: str) -> RankSpec:
    """A spec written by :func:`spec_to_json`, validated again like a scenario: a file
    in a results folder is data, never code (no pickle; plug-ins are looked up by name
    in the registries, so the file cannot name arbitrary code)."""
    from bench.scenario.config import build
    from bench.scenario.model import RecoverySpec, WorkloadSpec
    from bench.scenario.strategy import STRATEGIES
    from bench.scenario.workload import WORKLOADS

    raw = json.loads(text)
    w, r = dict(raw.pop("workload")), dict(raw.pop("recovery"))
    workload = build(WorkloadSpec, {k: v for k, v in w.items() if k != "params"}, file=file, prefix="workload")
    workload = replace(
        workload, params=build(WORKLOADS[workload.kind].params, w["params"], file=file, prefix="workload.params")
    )
    recovery = RecoverySpec(
        strategy=r["strategy"],
        params=build(STRATEGIES[r["strategy"]].params, r["params"], file=file, prefix="recovery.params"),
    )
    hooks = tuple(HookSpec(**h) for h in raw.pop("hooks"))
    spec = RankSpec(
        **{**raw, "members": tuple(raw["members"]), "workload": workload, "recovery": recovery, "hooks": hooks}
    )
    _check_names(spec, file)
    return spec


def _check_names(spec: RankSpec, file: str) -> None:
    """The code a spec names is the code the registries name for its kinds, and the
    environment it sets is NCCL's only: a spec file cannot choose what runs."""
    import re

    from bench.scenario.config import ConfigError
    from bench.scenario.faults import FAULTS
    from bench.scenario.model import NCCL_NAME
    from bench.scenario.strategy import STRATEGIES
    from bench.scenario.workload import WORKLOADS

    for i, h in enumerate(spec.hooks):
        if h.kind not in FAULTS:
            raise ConfigError(file, f"hooks.{i}.kind", f"one of {FAULTS.choices()}", h.kind)
    strategy = STRATEGIES[spec.recovery.strategy]
    expected = {
        "entry": strategy.rank_entry,
        "policy": strategy.rank_policy,
        "workload_impl": WORKLOADS[spec.workload.kind].impl,
    } | {f"hooks.{i}.impl": FAULTS[h.kind].impl for i, h in enumerate(spec.hooks)}
    actual = {"entry": spec.entry, "policy": spec.policy, "workload_impl": spec.workload_impl} | {
        f"hooks.{i}.impl": h.impl for i, h in enumerate(spec.hooks)
    }
    for key, value in actual.items():
        if expected.get(key) != value:
            raise ConfigError(file, key, f"the registered {expected.get(key)!r}", value)
    for name in spec.env:
        if not re.fullmatch(NCCL_NAME, name):
            raise ConfigError(file, f"env.{name}", "a name NCCL_* or TORCH_NCCL_*", name)


if __name__ == "__main__":
    # A worker started by torchrun: ``python -m bench.rank.entry SPEC.json``; the rank
    # comes from torchrun's environment, the rest from the spec the harness wrote.
    with open(sys.argv[1]) as fh:
        template = spec_from_json(fh.read(), file=sys.argv[1])
    main(replace(template, rank=int(os.environ["RANK"])))
