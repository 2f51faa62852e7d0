"""The phases a recovery gains on a GPU cluster, which a run on CPUs cannot measure,
assumed from published figures and charged to the stacks that pay them.

A whole-job restart of 16,384 GPUs initialises NCCL communicators over every GPU, reads
every GPU's shard of the checkpoint from the cluster's storage at once, and waits for a
replacement host to be scheduled and started. The failure run measured the same steps
with gloo over a few CPU ranks and a local file: the right shape, the wrong size. Each
phase here is drawn through its published (count, seconds) points (keys of
:class:`bench.project.assumptions.TargetCluster`, printed with their sources, changed
with ``--set`` or a cluster file):

- **communicator initialisation** (``comm_init_at``, ``comm_init_growth``) against the
  GPUs whose communicators are formed;
- **checkpoint load from cluster storage** (``storage_read_gb_s``): the state per GPU
  times the GPUs that load it, over the storage's aggregate read bandwidth (they all
  read at once, so the job's total state sets the time);
- **a replacement host's scheduling and start** (``host_start_at``,
  ``host_start_growth``) against the job's hosts.

Which stack pays which is :data:`PAYS`, one declared table. Each phase is counted beyond
the run's own phase that does the same work (the group formation a stack measured, its
restore): the longer of the two is what a cluster waits, so the part shown is the
published figure less that phase's projected seconds, floored at 0, and nothing is
counted twice. ``gpu_phases = false`` leaves them all out, for a projection of the CPU
run alone to compare with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from bench.project.assumptions import Growth, TargetCluster
from bench.project.source import PointFigures
from bench.scale.growth import fit_model

#: The parts of lost time this module adds, in the order tables list them.
GPU_PARTS = ("comm_init", "storage_load", "host_start")
#: The run's phase whose bytes a storage load moves.
RESTORE = "restore"
#: State each GPU loads where no size is given (model_params, state_bytes_per_gpu): the
#: largest per-GPU checkpoint the Llama 3 report gives (section 3.3.1: 1 MB to 4 GB).
LLAMA3_STATE_BYTES_PER_GPU = 4e9

Comm = Literal["job", "group", "replicas", "none"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Pays:
    """Which GPU phases one stack pays per failure, and why."""

    comm: Comm
    """Whose communicators are initialised: ``job``, every GPU's (a whole-job restart);
    ``group``, the re-formed group's, in place: the survivors' at the shrink and, where the
    world grows back, the whole world's again when a replacement joins; ``replicas``,
    torchft's replica-dimension communicator (one member per replica group, taken as one
    group per host), re-formed at every quorum change: the drop and the join; ``none``."""
    formed_by: str
    """The run's phase that formed the group: the same work on gloo and a few CPU ranks,
    credited against the published figure."""
    load: bool
    """Whether its GPUs read the state back from cluster storage (only where the point's
    trials wrote checkpoints: a stack that saved none has none to read)."""
    host: bool
    """Whether it waits for a replacement host to be scheduled and started."""
    why: str
    """The reason, printed beside the projection."""


_RESTARTS = "stops every worker and starts new ones: new communicators over every GPU, every GPU's shard read "
_RESTARTS += "from storage, and a replacement host scheduled and started before the job can form again"
#: The declared table: which stack pays which GPU phase.
PAYS: dict[str, Pays] = {
    "restart": Pays(comm="job", formed_by="pg", load=True, host=True, why=f"torchrun {_RESTARTS}"),
    "nvrx-launcher": Pays(comm="job", formed_by="pg", load=True, host=True, why=f"ft_launcher {_RESTARTS}"),
    "command": Pays(
        comm="job", formed_by="pg", load=True, host=True, why=f"a job under torchrun (docs/your-job.md) {_RESTARTS}"
    ),
    "ray-train": Pays(
        comm="job",
        formed_by="start",
        load=True,
        host=True,
        why=f"Ray Train's new worker group (TorchConfig forms its group in 'start') {_RESTARTS}",
    ),
    "reinit": Pays(
        comm="group",
        formed_by="reconfigure",
        load=False,
        host=False,
        why="the survivors re-form the group in place with their state in memory and wait for no host (the "
        "smaller world's lost throughput is the degraded part); the group forms again when it regrows",
    ),
    "torch-reconfigure": Pays(
        comm="group",
        formed_by="reconfigure",
        load=False,
        host=False,
        why="torch re-forms the survivors' group in place (dist._reconfigure), state in memory, no host waited for",
    ),
    "nvrx-inprocess": Pays(
        comm="group",
        formed_by="pg",
        load=True,
        host=False,
        why="the same processes re-form a group and resume from the last checkpoint in storage; no host waited for",
    ),
    "failstop": Pays(
        comm="none", formed_by="", load=False, host=False, why="plain DDP does not recover: it has no projection"
    ),
    "torchft": Pays(
        comm="replicas",
        formed_by="reconfigure",
        load=False,
        host=False,
        why="healthy replica groups keep their own communicators and train on; torchft re-forms the replica "
        "dimension's (Manager._async_quorum reconfigures its process group at every quorum change: the drop and "
        "the replacement's join, during the forward pass, which this does not subtract); the replacement group "
        "heals from a live peer and starts its own, off the survivors' path",
    ),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Cost:
    """One GPU phase of one stack at one cluster size."""

    seconds: float
    """What the published figures give it per failure (every initialisation, load or start it pays)."""
    counted: float
    """Seconds lost beyond the run's own phase that does the same work (``seconds`` less that
    phase's projected time, floored at 0): its part of the lost time."""
    over: str
    """What it was read at (GPUs, hosts, bytes)."""


def through(points: tuple[tuple[float, float], ...], growth: Growth, x: float) -> float:
    """Seconds at count ``x`` on the line (in x or log2 x) fitted through published points,
    never below 0; one count, ``constant`` or a falling fit give their mean (a cost is not
    assumed to fall as the job grows, as :mod:`bench.scale.growth` holds)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    flat = float(np.mean(ys))
    if growth == "constant" or len(set(xs)) < 2:
        return flat
    fit = fit_model(growth, xs, ys)
    return flat if fit.coef[1] < 0 else fit.predict(max(1.0, x))


def comm_init_s(c: TargetCluster, members: float) -> float:
    """Seconds to initialise communicators over ``members`` GPUs."""
    return through(c.comm_init_at, c.comm_init_growth, members)


def host_start_s(c: TargetCluster, hosts: float) -> float:
    """Seconds to schedule and start a job of ``hosts`` hosts again."""
    return through(c.host_start_at, c.host_start_growth, hosts)


def state_per_gpu(c: TargetCluster, gpus: int) -> float:
    """Bytes each GPU loads: the cluster's state size where given, else Llama 3's largest."""
    given = c.state_bytes(gpus)
    return LLAMA3_STATE_BYTES_PER_GPU if given is None else given


def load_s(c: TargetCluster, gpus: int, loaders: int) -> float:
    """Seconds for ``loaders`` GPUs to read their state from storage at once."""
    return loaders * state_per_gpu(c, gpus) / (c.storage_read_gb_s * 1e9)


def costs(point: PointFigures, c: TargetCluster, n: int) -> tuple[dict[str, tuple[float, str]], str]:
    """Published seconds per failure of each GPU phase ``point``'s stack pays at ``n`` GPUs
    (with what it was read at), and its phase credited against each, by part."""
    pays = PAYS.get(point.strategy)
    if not c.gpu_phases or pays is None:
        return {}, ""
    lost = min(c.gpus_per_host, n - 1)
    hosts = c.hosts(n)
    again = point.shrinks  # a world that shrank forms again when it grows back
    out: dict[str, tuple[float, str]] = {}
    members: list[float] = {
        "job": [float(n)],
        "group": [float(n - lost), float(n)] if again else [float(n)],
        "replicas": [float(max(1, hosts - 1)), float(hosts)] if again else [float(hosts)],
        "none": [],
    }[pays.comm]
    if members:
        unit = "replica groups" if pays.comm == "replicas" else "GPUs"
        out["comm_init"] = (
            sum(comm_init_s(c, m) for m in members),
            " then ".join(f"{m:,.0f}" for m in members) + f" {unit}",
        )
    if pays.load and point.checkpoints:
        loaders = n if pays.comm == "job" else n - lost
        nbytes = state_per_gpu(c, n)
        out["storage_load"] = (load_s(c, n, loaders), f"{loaders:,} GPUs x {nbytes / 1e9:.3g} GB")
    if pays.host:
        out["host_start"] = (host_start_s(c, hosts), f"{hosts:,} hosts")
    return out, pays.formed_by


def lost(
    point: PointFigures, c: TargetCluster, n: int, projected: Mapping[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, Cost]]:
    """Seconds lost per failure to each GPU phase at ``n`` GPUs, per row of ``projected``
    (the point's phases at ``n``, one value per bootstrap row), beyond the run's own phase
    that does the same work; and the estimate's costs, for the tables."""
    published, formed_by = costs(point, c, n)
    credit = {"comm_init": formed_by, "storage_load": RESTORE}
    rows = len(next(iter(projected.values()))) if projected else 1
    parts: dict[str, np.ndarray] = {}
    shown: dict[str, Cost] = {}
    for part, (seconds, over) in published.items():
        own = projected.get(credit.get(part, ""), np.zeros(rows))
        parts[part] = np.maximum(0.0, seconds - own)
        shown[part] = Cost(seconds=seconds, counted=float(parts[part][0]) if rows else seconds, over=over)
    return parts, shown


def fmt(v: float) -> str:
    if v >= 120:
        return f"{v / 60:.1f} min"
    return f"{v:.3g} s"


def points(points: tuple[tuple[float, float], ...], unit: str) -> str:
    return ", ".join(f"{s:g} s at {n:,.0f} {unit[:-1] if n == 1 else unit}" for n, s in points)


def beyond(points: tuple[tuple[float, float], ...], x: float) -> str:
    top = max(n for n, _ in points)
    return f"; extrapolated past {top:,.0f} to {x:,.0f}" if x > top and not math.isclose(x, top) else ""
