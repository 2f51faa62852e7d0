"""What a run ran on: versions, machine, knobs and the clock, for ``run.json``.

Reports compare the same scenario across versions, so every run records the stack it
measured, down to the environment variables that change NCCL's or gloo's behaviour.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import platform
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import bench
from bench.procs.events import CLOCK
from bench.scenario.strategy import stack_packages

KNOB = re.compile(
    r"^(NCCL_|TORCH_NCCL_|TORCH_DISTRIBUTED_|TORCH_GLOO_|GLOO_|TORCHELASTIC_|TORCHFT_|"
    r"TORCH_DISABLE_|OMP_NUM_THREADS$|MASTER_|CUDA_VISIBLE_DEVICES$|RUST_LOG$)"
)


def package_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def versions() -> dict[str, Any]:
    """For run.json: ftbench and CUDA beside the stack (:func:`stack_versions`), and
    each installed distribution of the stacks' packages by its distribution name."""
    import torch

    dists = [d for p in stack_packages() for d in p.dists]
    return {
        "ftbench": bench.__version__,
        "cuda": torch.version.cuda,
        **stack_versions(),
        **{name: version for name in dists if (version := package_version(name))},
    }


@functools.cache
def stack_versions() -> dict[str, Any]:
    """The versions of the stack under test in this interpreter's environment: every
    trials.csv row carries them, so that runs in several environments compare. The
    packages beyond torch are the ones strategies declare (``Strategy.packages``)."""
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "nccl": _nccl_version(),
        **{p.column: _version_of(provider(p.module, *p.dists)) for p in stack_packages()},
    }


def _nccl_version() -> str | None:
    """The NCCL torch was built with, where CUDA is usable (None on the CPU)."""
    import torch

    if not torch.cuda.is_available():
        return None
    try:
        return ".".join(map(str, torch.cuda.nccl.version()))  # type: ignore[no-untyped-call]
    except Exception:
        return None


def provider(module: str, *names: str) -> tuple[str, str] | None:
    """(distribution, version) of the distribution that ``import module`` would load,
    or None if it is not importable.

    Looked up next to the importable package, not by distribution name: two
    distributions may provide the same package (``torchft`` and ``torchft-nightly``),
    and an environment of ``ftbench run --env`` shadows the harness's packages.
    """
    spec = importlib.util.find_spec(module)
    if spec is None:
        return None
    if spec.origin is not None:
        root = str(Path(spec.origin).parent.parent)
    elif spec.submodule_search_locations:  # a namespace package (nvidia_resiliency_ext)
        root = str(Path(next(iter(spec.submodule_search_locations))).parent)
    else:
        return None
    wanted = {n.lower().replace("_", "-") for n in names}
    for dist in importlib.metadata.distributions(path=[root]):
        name = dist.metadata["Name"] or ""
        if name.lower().replace("_", "-") in wanted:
            return name, dist.version
    return "unknown", "unknown"


def _version_of(found: tuple[str, str] | None) -> str | None:
    return None if found is None else found[1]


def host() -> dict[str, Any]:
    """The machine the harness runs on, for run.json."""
    import torch

    mem = None
    try:
        with open("/proc/meminfo") as fh:
            mem = int(fh.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    gpus = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    )
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "memory_bytes": mem,
        "gpus": gpus,
        "root": os.geteuid() == 0,
    }


def knobs() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if KNOB.match(k)}


def clock() -> dict[str, Any]:
    info = time.get_clock_info("monotonic")
    return {
        "clock": CLOCK,
        "implementation": info.implementation,
        "resolution_s": info.resolution,
        "note": "figures are differences of one host's monotonic clock; an injection is "
        "stamped just before kill(2) and t_sent just after (see inject events)",
    }


def commit() -> str:
    """Short commit of the ftbench source, ``+dirty`` if modified; ``nogit`` outside git."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        if not sha:
            return "nogit"
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "nogit"


def resolve_backend(requested: str, world_size: int) -> str:
    """``auto``: NCCL when every local rank can have a GPU of its own, else gloo."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "auto":
        return "nccl" if gpus >= world_size else "gloo"
    if requested == "nccl" and gpus < world_size:
        raise RuntimeError(
            f"backend 'nccl' needs {world_size} GPUs (one per rank: NCCL refuses two ranks of a communicator "
            f"on one GPU); this machine has {gpus}"
        )
    return requested


def resolve_device(requested: str, backend: str) -> str:
    """Where a point's tensors live (``workload.device``), its backend resolved: CUDA with
    NCCL or when asked for, else the CPU. Asking for CUDA on a machine that has none is
    a RuntimeError saying so, which the runner turns into the point's skip reason, as it
    does for NCCL without GPUs."""
    if requested == "cuda":
        import torch

        if not torch.cuda.is_available():
            build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
            raise RuntimeError(
                f'workload.device = "cuda" needs a CUDA device; torch {torch.__version__} ({build}) sees none here'
            )
        return "cuda"
    return "cuda" if backend == "nccl" else "cpu"
