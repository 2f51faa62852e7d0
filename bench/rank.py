"""Entry point of every rank process, whatever launched it.

The first event (``proc_start``, with the pid) is written before torch is imported, so
the harness can target a rank the moment it exists and the import time is visible.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.events import EventWriter
from bench.procs import redirect_output, set_pdeathsig


@dataclass(frozen=True, kw_only=True, slots=True)
class RankSpec:
    """Everything a rank needs, picklable (sent through the forkserver or a JSON file)."""

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
    """``module:function(spec, events) -> exit code`` of the strategy's rank loop."""
    workload: Any
    """:class:`bench.scenario.WorkloadSpec` of the point."""
    recovery: Any
    """:class:`bench.scenario.RecoverySpec` of the point."""
    backend: str
    """Resolved backend (``gloo`` or ``nccl``)."""
    seed: int
    wait_s: float
    """Upper bound of any wait of the rank (the trial deadline)."""
    role: str = "initial"
    faults: tuple[Any, ...] = ()
    """The scenario's :class:`bench.faults.FaultSpec` list: rank-side ones get hooks."""
    checkpoint_dir: str = ""
    """Where ``restart`` keeps its checkpoint (the trial's directory)."""
    netns: str = ""
    """Network namespace of the rank's host (entered before any socket exists)."""
    pdeathsig: bool = True
    """Die with the parent. Off for torchrun's workers: whether they outlive a dead agent
    is part of the behaviour under test (the guard still sweeps them)."""


def main(spec: RankSpec) -> None:
    if spec.pdeathsig:
        set_pdeathsig()
    # c10d and gloo warnings, a crash's traceback: beside the event log, off the console.
    redirect_output(Path(spec.events_dir) / f"rank{spec.rank}-{os.getpid()}.log")
    if spec.netns:
        from injectors.netns import enter

        enter(spec.netns)
        os.environ["GLOO_SOCKET_IFNAME"] = "eth0"
    events = EventWriter(Path(spec.events_dir) / f"rank{spec.rank}-{os.getpid()}.jsonl",
                         src="rank", rank=spec.rank, pid=os.getpid())
    events.emit("proc_start", role=spec.role)
    code = 3
    try:
        module, _, func = spec.entry.partition(":")
        entry = getattr(__import__(module, fromlist=[func]), func)
        events.emit("import_done")
        code = int(entry(spec, events))
    except BaseException as err:  # the record matters more than the exception type
        events.emit("crash", error=f"{type(err).__name__}: {err}"[:500], traceback=traceback.format_exc()[-2000:])
    finally:
        events.emit("proc_exit", exitcode=code)
        events.close()
    os._exit(code)


def store_client(spec: RankSpec) -> Any:
    """A rank's connection to the launcher's store (torch is imported here, not above:
    this module runs before the rank imports torch)."""
    import datetime

    import torch.distributed as dist

    return dist.PrefixStore(spec.store_prefix, dist.TCPStore(
        spec.store_host, spec.store_port, None, False, timeout=datetime.timedelta(seconds=spec.wait_s)))


def device(spec: RankSpec) -> Any:
    """The rank's device: its own GPU with NCCL (``LOCAL_RANK`` under torchrun), else CPU."""
    import torch

    if spec.backend == "nccl":
        index = int(os.environ.get("LOCAL_RANK", spec.rank)) % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


if __name__ == "__main__":
    # A worker started by torchrun: ``python -m bench.rank SPEC.pkl``; the rank comes
    # from torchrun's environment, the rest from the spec the harness wrote.
    with open(sys.argv[1], "rb") as fh:
        template: RankSpec = pickle.load(fh)
    main(replace(template, rank=int(os.environ["RANK"])))
