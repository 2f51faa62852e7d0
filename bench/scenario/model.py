"""What a scenario is, once read: frozen, keyword-only dataclasses.

A scenario is ``workload x fault(s) x recovery strategy x sweep x gate``; a point is one
cell of its sweep. Reading, overriding and validating them is :mod:`bench.scenario.loader`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bench.scenario.config import bounded
from bench.scenario.faults import FaultSpec
from bench.scenario.limits import MAX_SECONDS

MAX_FIGURE = 1e15
"""Service-level bounds are at most this in magnitude (a petabyte, 30 million years)."""
MAX_SLOS = 64
"""``[[gate.slo]]`` entries at most."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkloadSpec:
    kind: str = "ddp"
    """A registered workload (``ftbench list --workloads``)."""
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """``auto`` picks NCCL when every rank can have its own GPU, else gloo."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the ranks' tensors live. ``auto``: a GPU of its own per rank with NCCL, the
    CPU with gloo. ``cuda``: CUDA tensors whatever the backend; with gloo the ranks may
    share one GPU (gloo moves CUDA tensors through host memory for all_reduce and
    broadcast, which is what DDP needs; NCCL refuses two ranks of a communicator on one
    GPU). A point with ``cuda`` on a machine without a CUDA device is skipped, saying so.
    ``cpu``: host tensors (gloo only)."""
    world_size: int = bounded(4, ge=2, le=256)
    """Ranks at the start of a trial."""
    steps: int = bounded(200, ge=1)
    """Steps every rank agrees to run (a fixed count: a time limit would make the first
    rank to finish look like a crash to the others)."""
    warmup_steps: int = bounded(5, ge=0)
    """Leading steps left out of the fault-free step-time median."""
    pg_timeout_s: float = bounded(30.0, gt=0, le=MAX_SECONDS)
    """Process-group timeout, passed explicitly (gloo's default never fires in practice)."""
    params: Any = None
    """The kind's own knobs, written flat in ``[workload]``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoverySpec:
    strategy: str
    """A registered strategy (``ftbench list``); without one, the strategy registered as
    the default."""
    params: Any = None
    """Knobs of the chosen strategy, from ``[recovery.<strategy>]``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasureSpec:
    trials: int = bounded(5, ge=1)
    """Repetitions of every point."""
    seed: int = bounded(0, ge=0)
    """Seeds data and model: the same in every trial of a point, so that trials differ
    only in timing and each can be compared with the fault-free reference. At most what
    keeps ``seed * 1000003 + workload.steps`` below 2**63 (the workloads' generators)."""
    deadline_s: float = bounded(120.0, gt=0, le=MAX_SECONDS)
    """Wall-clock limit of one trial; past it everything is killed and the trial is
    recorded as ``hung``."""
    reference: bool = False
    """Run one fault-free trial per point first: ``loss_delta`` needs it, and ``goodput``
    and ``degraded_step_ratio`` then use its median step time."""
    resources: bool = False
    """Sample every process of each trial (resident memory, threads) and the bytes its
    hosts send (:mod:`bench.procs.resources`): the ``rss_*``, ``job_*`` and
    ``wire_bytes_per_step`` figures. Where namespaces work (root), a trial that would
    run on the machine's loopback is confined to a private network namespace, so that
    its loopback counts the job's bytes and nothing else."""
    interleave: bool = False
    """Run trial 1 of every point, then trial 2 of every point, and so on (instead of
    every trial of one point, then the next): points compared by their ratio then see
    the same drift of a shared machine. Points of another ``launch.env`` still run
    whole, in their child harness."""


NCCL_NAME = r"(TORCH_)?NCCL_[A-Z0-9_]+"
"""Names ``launch.nccl.extra`` may set: NCCL's own and torch's ProcessGroupNCCL's."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NcclSpec:
    """The environment NCCL process groups read when they are made: the knobs users tune
    for detection on GPUs. Each unset key leaves torch's default; every set key is
    recorded in run.json with the point. They act on NCCL only: a point that runs on gloo
    (no GPU here) with any of them set is skipped with that reason rather than measured
    as if they had applied."""

    async_error_handling: int | None = bounded(None, ge=0, le=3)
    """``TORCH_NCCL_ASYNC_ERROR_HANDLING``: 0 nothing, 1 tear down the process on an
    error or timeout, 2 abort the communicators only, 3 tear down without aborting."""
    blocking_wait: bool | None = None
    """``TORCH_NCCL_BLOCKING_WAIT``: ``wait()`` blocks and raises on the timeout itself
    instead of the watchdog thread finding it."""
    dump_on_timeout: bool | None = None
    """``TORCH_NCCL_DUMP_ON_TIMEOUT``: write the Flight Recorder trace on a timeout."""
    trace_buffer_size: int | None = bounded(None, ge=0, le=10_000_000)
    """``TORCH_NCCL_TRACE_BUFFER_SIZE``: entries the Flight Recorder keeps (0: off)."""
    heartbeat_timeout_s: int | None = bounded(None, ge=1, le=MAX_SECONDS)
    """``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC``: how long the monitor thread waits on a
    stuck watchdog before it kills the process."""
    enable_monitoring: bool | None = None
    """``TORCH_NCCL_ENABLE_MONITORING``: run that monitor thread at all."""
    use_nccl2: bool | None = None
    """``TORCH_DIST_USE_NCCL2``: which NCCL process group ``backend = "nccl"`` makes. torch
    2.15 makes the rewritten one (ProcessGroupNCCL2) unless this is false; torch 2.14
    makes the legacy one unless this is true. Unset: the release's own default."""
    extra: dict[str, str] = field(default_factory=dict)
    """Any other ``NCCL_*`` or ``TORCH_NCCL_*`` variable, by name (``NCCL_DEBUG = "WARN"``)."""

    def environment(self) -> dict[str, str]:
        """The variables to set in every rank before its process group exists."""
        named = {
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": self.async_error_handling,
            "TORCH_NCCL_BLOCKING_WAIT": self.blocking_wait,
            "TORCH_NCCL_DUMP_ON_TIMEOUT": self.dump_on_timeout,
            "TORCH_NCCL_TRACE_BUFFER_SIZE": self.trace_buffer_size,
            "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": self.heartbeat_timeout_s,
            "TORCH_NCCL_ENABLE_MONITORING": self.enable_monitoring,
            "TORCH_DIST_USE_NCCL2": self.use_nccl2,
        }
        env = {k: str(int(v)) for k, v in named.items() if v is not None}
        return env | dict(self.extra)


StartMethod = Literal["auto", "forkserver", "forkserver-private", "spawn"]
"""The launch modes (``launch.start_method``; ``ftbench calibrate --start-method``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchSpec:
    start_method: StartMethod = "auto"
    """How ftbench's launcher starts ranks. ``spawn``: fresh interpreters, as a job's own
    launcher starts them (each pays the torch import). ``forkserver``: forked from a
    process that already imported torch (tens of milliseconds), which also makes a
    SIGKILLed rank vanish sooner (measured: 5.7 ms instead of 14 ms, so its peers see
    its sockets close earlier; docs/facts.md). ``forkserver-private``: forked, then the
    rank copies the memory it shares with the forkserver and maps the libraries' pages
    the forkserver uses, so that its exit undoes what a fresh interpreter's would
    (:mod:`bench.rank.private`; docs/calibration.md compares the three). ``auto``: what
    the strategy declares."""
    network: Literal["auto", "loopback", "namespaces"] = "auto"
    """``namespaces``: every host in a network namespace of its own, linked through a
    bridge (needed by link faults; root only). ``auto``: namespaces when a link fault
    is in the scenario, else everything on loopback."""
    wire_packets: bool = False
    """With namespaces: turn TCP segmentation offload off so that link faults see
    MTU-sized packets, as on a wire (per-packet loss and corruption then mean what they
    say), at the price of a slower clean link. Off: 64 KiB super-packets, as with a
    NIC doing TSO (netem on such a host behaves the same)."""
    interposer: Literal["auto", "always"] = "auto"
    """``auto``: a stock strategy's collectives run as shipped unless a rank-side fault
    needs a hook in their path. ``always``: put that thin interposer there in every
    trial, to measure what it costs (step time, detection) against ``auto``."""
    env: str = ""
    """Requirements of the environment the trials run in (``"torch==2.13.0"``, several
    separated by spaces; names and versions of the package index only): built once into
    a cached virtual environment. "" is the harness's own. Sweep it to compare versions
    (``ftbench run SCENARIO --env torch==2.13.0 --env torch==2.14.1``)."""
    nccl: NcclSpec = field(default_factory=NcclSpec)
    """NCCL's and torch's ProcessGroupNCCL's environment (``[launch.nccl]``)."""
    ranks_per_host: int = bounded(1, ge=1)
    """Ranks per host: a fault with ``target = { host = k }`` hits all ranks of host k
    at once (node loss), and link faults act on a host's network namespace."""
    agents: bool = False
    """Run every host as a separate machine would: a network namespace AND a time
    namespace of its own, with one ``ftbench host`` agent that starts the host's ranks,
    carries out the faults aimed at them and stamps on the host's own clock, which the
    harness maps onto its own (docs/multihost.md). Root only; strategies that declare
    ``agents``."""
    clock_shift_s: float = bounded(1000.0, ge=0, le=1e6)
    """With agents: host i's CLOCK_MONOTONIC runs ``(i + 1) x clock_shift_s`` ahead of the
    harness's, so that a wrong clock alignment shows as a wrong figure."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SLOSpec:
    metric: str
    """A figure (column of trials.csv)."""
    stat: Literal["median", "mean", "min", "max", "p90", "p95", "p99"] = "median"
    """Statistic over a point's trials that the bounds apply to."""
    min: float | None = bounded(None, ge=-MAX_FIGURE, le=MAX_FIGURE)
    """Lower bound (inclusive)."""
    max: float | None = bounded(None, ge=-MAX_FIGURE, le=MAX_FIGURE)
    """Upper bound (inclusive; not below ``min``)."""
    point: str | None = None
    """Only points whose label contains this text (default: every point)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GateSpec:
    metric: str = "ttr_s"
    """Figure compared between baseline and candidate."""
    factor: float = bounded(1.10, ge=1.0)
    """Candidate median above factor x baseline median is a regression..."""
    floor_s: float = bounded(0.01, ge=0)
    """...if it is also above it by more than this absolute amount..."""
    alpha: float = bounded(0.05, gt=0, lt=1)
    """...and a two-sided Mann-Whitney U test gives p below this."""
    min_trials: int = bounded(7, ge=2)
    """Fewer trials on either side is "insufficient", which is not a pass."""
    slo: tuple[SLOSpec, ...] = bounded((), max_items=MAX_SLOS)
    """Absolute service levels, checked on a single run."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Scenario:
    name: str
    description: str
    workload: WorkloadSpec
    faults: tuple[FaultSpec, ...]
    recovery: RecoverySpec
    measure: MeasureSpec
    launch: LaunchSpec
    gate: GateSpec
    sweep: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    skip_refused: bool = False
    """``sweep.refused = "skip"``: a combination of the sweep that validation refuses (a
    stack that cannot serve a workload's layout) is left out with its reason, recorded
    among the run's skipped points, instead of refusing the whole scenario."""
    source: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The parsed TOML with overrides applied, before the sweep: points derive from it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    """One cell of a scenario's sweep: a fully resolved configuration."""

    scenario: Scenario
    values: tuple[tuple[str, Any], ...]
    """The sweep assignments that made this point (empty without a sweep)."""
    label: str
    point_hash: str
