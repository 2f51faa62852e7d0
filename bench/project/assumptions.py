"""The cluster a projection is for, and where each default comes from.

A projection is only as good as what it assumes, so every assumption is a named key with
a default, a source in words (or the plain statement that it is an assumption), and a
way to override it: a small TOML file (``--cluster FILE``) and ``--set KEY=VALUE`` on
top (the value read as TOML, as ``ftbench run --set`` does). Bad input is a
:class:`ConfigError` naming the file and the key (exit 2 in the CLI).

The failure-rate default is computed here, not typed in: Meta's Llama 3 report ("The
Llama 3 Herd of Models", 2024, section 3.3.4) counts 419 unexpected interruptions in a
54-day snapshot of pre-training on 16,384 H100 GPUs (8 per host), about 78 % of them
attributed to hardware. 419 / (54 x 16,384) = 4.74e-4 per GPU-day, 0.47 per 1,000
GPU-days, a job-level mean time between failures of 3.1 h at 16K GPUs.

The phases a GPU cluster adds to a recovery (``gpu_phases`` and the keys after it) are
named here with their published points; :mod:`bench.project.gpu` draws each through its
points and says which stack pays which.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from bench.scenario.config import ConfigError
from bench.scenario.overrides import split_setting, toml_value

#: Llama 3 405B pre-training snapshot (see the module docstring).
LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
LLAMA3_GPUS_PER_HOST = 8
LLAMA3_RATE_PER_GPU_DAY = LLAMA3_INTERRUPTIONS / (LLAMA3_DAYS * LLAMA3_GPUS)
DAY_S = 86_400.0

Rule = Literal["daly", "young"]
Growth = Literal["linear", "log", "constant"]
#: The GPU phases' keys whose value is published (count, seconds) points.
POINT_KEYS = ("comm_init_at", "host_start_at")


@dataclass(frozen=True, kw_only=True, slots=True)
class TargetCluster:
    """What the projection assumes about the target cluster; every field a key."""

    gpus: tuple[int, ...] = (1_024, 16_384, 100_000)
    """Cluster sizes (GPUs, one rank each) to project to."""
    gpus_per_host: int = LLAMA3_GPUS_PER_HOST
    """GPUs per host; a failure takes one host's ranks out of the world."""
    failures_per_gpu_day: float = LLAMA3_RATE_PER_GPU_DAY
    """Unexpected interruptions per GPU per day (used when failures_per_host_day is unset)."""
    failures_per_host_day: float | None = None
    """Interruptions per host per day; overrides failures_per_gpu_day when given."""
    checkpoint_write_s: float = 30.0
    """Seconds a checkpoint write stalls training (delta)."""
    checkpoint_interval_s: float | Literal["optimal"] = "optimal"
    """Seconds between checkpoints (tau), or ``optimal`` (interval_rule)."""
    interval_rule: Rule = "daly"
    """``daly``: tau = sqrt(2 delta M) - delta; ``young``: tau = sqrt(2 delta M)."""
    full_strength_s: float = 1_800.0
    """For stacks that go on with a smaller world and whose run measured no return to full
    strength (ttfs_s): seconds until a replacement host has joined."""
    model_params: float | None = None
    """Parameters of the model the cluster trains (``70e9``). With ``bytes_per_param`` it
    sizes the state each GPU writes and restores, which a state-scaling run's fits turn
    into seconds; unset, the state of the measured run is kept as it was."""
    bytes_per_param: float = 14.0
    """Bytes of checkpointed training state per parameter: bf16 weights (2), an fp32
    master copy (4) and Adam's two moments (8); gradients are not saved."""
    shard_gpus: int | None = None
    """GPUs one copy of the state is sharded over (the FSDP / ZeRO-3 group): each holds
    model_params x bytes_per_param / shard_gpus. Unset: the whole job (fully sharded)."""
    state_bytes_per_gpu: float | None = None
    """Bytes of state each GPU writes and restores; overrides model_params when given."""
    oversubscribed: Literal["measured", "per-core"] = "measured"
    """How a scaling run's phases measured with more ranks than cores are fitted:
    ``measured`` as they are (an upper bound on growth), ``per-core`` divided by
    ranks / cores (as if every rank had a core: a lower bound for CPU-bound phases)."""
    control_plane: Literal["model", "measured"] = "model"
    """Where the phases that are control-plane work take their growth from, given a scale
    run: ``model``, the coordinators replayed on a cluster (a CPU per participant, the
    coordinator on a host of its own: :mod:`bench.scale.model`), calibrated by that run,
    the band reaching down to what the run measured; ``measured``, the run's own curves,
    bounded above by its participants sharing 2 cores."""
    gpu_phases: bool = True
    """Add the phases a recovery gains on a GPU cluster, which a CPU run cannot measure:
    communicator initialisation, a checkpoint load from cluster storage, a replacement
    host's scheduling and start (:mod:`bench.project.gpu` says which stack pays which).
    ``false``: leave them out, for a CPU-only projection to compare with."""
    comm_init_at: tuple[tuple[float, float], ...] = ((2_048, 5.0), (10_000, 30.0))
    """Published (GPUs, seconds) of initialising a job's communicators, through which
    ``comm_init_growth`` is drawn."""
    comm_init_growth: Growth = "linear"
    """How communicator initialisation grows between and past those points: ``linear``
    (a + b N, least squares through them), ``log`` (a + b log2 N) or ``constant``."""
    storage_read_gb_s: float = 2_000.0
    """Aggregate GB/s the cluster's storage serves checkpoint reads at, shared by every GPU
    that loads at once."""
    host_start_at: tuple[tuple[float, float], ...] = ((1, 5.0), (15_000, 60.0))
    """Published (hosts, seconds) of scheduling and starting a job's hosts again."""
    host_start_growth: Growth = "linear"
    """How that grows with the hosts between and past those points (as comm_init_growth)."""

    def host_rate(self) -> float:
        """Failures per host per second."""
        per_day = (
            self.failures_per_host_day
            if self.failures_per_host_day is not None
            else self.failures_per_gpu_day * self.gpus_per_host
        )
        return per_day / DAY_S

    def hosts(self, gpus: int) -> int:
        return math.ceil(gpus / self.gpus_per_host)

    def rate(self, gpus: int) -> float:
        """lambda: failures per second of the whole job (every host fails independently)."""
        return self.hosts(gpus) * self.host_rate()

    def state_bytes(self, gpus: int) -> float | None:
        """Bytes of state per GPU in a job of ``gpus`` GPUs; None when no size was given."""
        if self.state_bytes_per_gpu is not None:
            return self.state_bytes_per_gpu
        if self.model_params is None:
            return None
        return self.model_params * self.bytes_per_param / min(gpus, self.shard_gpus or gpus)

    def interval(self, gpus: int, delta: float | None = None) -> tuple[float, str]:
        """tau for a job of ``gpus`` GPUs whose writes take ``delta`` seconds (the
        assumption ``checkpoint_write_s`` when no measurement gives one), and how it was chosen."""
        delta = self.checkpoint_write_s if delta is None else delta
        if self.checkpoint_interval_s != "optimal":
            return float(self.checkpoint_interval_s), "given"
        mtbf = 1.0 / self.rate(gpus)
        young = math.sqrt(2.0 * delta * mtbf)
        if self.interval_rule == "young":
            return young, "optimal (Young: sqrt(2 delta M))"
        # Daly's first-order optimum holds for delta < 2M; past it, checkpoint every M.
        if delta >= 2.0 * mtbf:
            return mtbf, "optimal (Daly; delta >= 2M, so tau = M)"
        return young - delta, "optimal (Daly: sqrt(2 delta M) - delta)"


#: Where each default comes from, in words, printed beside every projection.
SOURCES: dict[str, str] = {
    "gpus": "the issue's 1K, 16K and 100K GPUs",
    "gpus_per_host": "8 H100 per host, as in the Llama 3 report",
    "failures_per_gpu_day": (
        f"Llama 3 report (Meta, 2024): {LLAMA3_INTERRUPTIONS} unexpected interruptions in {LLAMA3_DAYS} days "
        f"on {LLAMA3_GPUS:,} H100 GPUs = {LLAMA3_RATE_PER_GPU_DAY * 1e3:.3f} per 1,000 GPU-days"
    ),
    "failures_per_host_day": "unset: failures_per_gpu_day x gpus_per_host",
    "checkpoint_write_s": "an assumption (a blocking sharded write), not a measurement: override it",
    "checkpoint_interval_s": "chosen to minimise lost time (interval_rule)",
    "interval_rule": "Daly (2006), a higher-order estimate of the optimum checkpoint interval; Young (1974)",
    "full_strength_s": "an assumption (time to bring a replacement host into a shrunken world): override it",
    "model_params": "unset: the state size of the measured run",
    "bytes_per_param": "mixed-precision Adam: bf16 weights 2 + fp32 master 4 + two fp32 moments 8",
    "shard_gpus": "unset: the state is sharded over the whole job",
    "state_bytes_per_gpu": "unset: model_params x bytes_per_param / shard_gpus",
    "oversubscribed": "phases fitted as measured, ranks sharing cores (per-core: the other bound)",
    "control_plane": (
        "the scale run's coordinators replayed on a cluster (docs/scale.md), the band down to the run's own "
        "curves (its participants on 2 cores: an upper bound); measured: those curves alone"
    ),
    "gpu_phases": "on: the GPU phases below, assumed from published figures (false: a CPU-only projection)",
    "comm_init_at": (
        "MegaScale (ByteDance, NSDI 2024): a 2,048-GPU job's initialisation cut from 1,047 s to under 5 s, "
        "over 10,000 GPUs under 30 s, with its optimisations; NVIDIA/nccl issue 1156: ~2.5 min at large "
        "scale on NCCL's default path, on launch and on restart"
    ),
    "comm_init_growth": (
        "linear: NCCL's bootstrap all-gather passes every rank's address round a ring of N steps; the O(N^2) "
        "loops NVIDIA/nccl PR 1789 removed (26 s at 96K ranks) are left out"
    ),
    "storage_read_gb_s": (
        "Llama 3 report, section 3.3.1: Tectonic sustains 2 TB/s (7 TB/s peak) for 16K GPUs' checkpoints of "
        "1 MB to 4 GB per GPU; DeepSeek's 3FS reads 6.6 TiB/s from 180 storage nodes"
    ),
    "host_start_at": (
        "Kubernetes pod start-up SLO: 5 s at the 99th percentile for one pod, images pulled; JobSet KEP-262: "
        "recreating a JobSet takes ~1 minute at ~15k nodes"
    ),
    "host_start_growth": "linear in hosts: a scheduler creates and places one pod per host",
}


def _expect(key: str) -> str:
    return {
        "gpus": "a list of positive integers (GPUs)",
        "gpus_per_host": "a positive integer",
        "failures_per_gpu_day": "a positive number",
        "failures_per_host_day": "a positive number",
        "checkpoint_write_s": "a number of seconds >= 0",
        "checkpoint_interval_s": 'a positive number of seconds or "optimal"',
        "interval_rule": '"daly" or "young"',
        "full_strength_s": "a number of seconds >= 0",
        "oversubscribed": '"measured" or "per-core"',
        "model_params": "a positive number of parameters (70e9)",
        "bytes_per_param": "a positive number of bytes",
        "shard_gpus": "a positive integer",
        "state_bytes_per_gpu": "a positive number of bytes",
        "gpu_phases": "true or false",
        "control_plane": '"model" or "measured"',
        "comm_init_at": "a list of [GPUs, seconds] pairs, 1 to 16, GPUs distinct positive integers, seconds >= 0",
        "host_start_at": "a list of [hosts, seconds] pairs, 1 to 16, hosts distinct positive integers, seconds >= 0",
        "comm_init_growth": '"linear", "log" or "constant"',
        "host_start_growth": '"linear", "log" or "constant"',
        "storage_read_gb_s": "a positive number of GB/s",
    }[key]


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _points(v: Any) -> tuple[tuple[float, float], ...] | None:
    """Published (count, seconds) pairs, or None when ``v`` is not 1 to 16 of them."""
    if not isinstance(v, list) or not 0 < len(v) <= 16:
        return None
    out = []
    for pair in v:
        if not (isinstance(pair, list) and len(pair) == 2 and all(_number(x) for x in pair)):
            return None
        n, s = pair
        if not (isinstance(n, int) and 0 < n <= 10**8 and 0 <= s <= 1e6):
            return None
        out.append((float(n), float(s)))
    return tuple(out) if len({n for n, _ in out}) == len(out) else None


def _check(file: str, key: str, v: Any) -> Any:
    """One key's value, validated; a ConfigError naming ``key`` otherwise."""
    ok: bool
    if key == "gpus":
        ok = isinstance(v, list) and 0 < len(v) <= 64 and all(isinstance(x, int) and 0 < x <= 10**8 for x in v)
        ok = ok and not any(isinstance(x, bool) for x in v)
        v = tuple(v) if ok else v
    elif key == "gpus_per_host":
        ok = isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1024
    elif key in ("failures_per_gpu_day", "failures_per_host_day"):
        ok = _number(v) and 0 < v <= 1e6
        v = float(v) if ok else v
    elif key in ("checkpoint_write_s", "full_strength_s"):
        ok = _number(v) and 0 <= v <= 1e9
        v = float(v) if ok else v
    elif key == "checkpoint_interval_s":
        ok = v == "optimal" or (_number(v) and 0 < v <= 1e9)
        v = v if v == "optimal" else (float(v) if ok else v)
    elif key == "interval_rule":
        ok = v in ("daly", "young")
    elif key == "oversubscribed":
        ok = v in ("measured", "per-core")
    elif key == "control_plane":
        ok = v in ("model", "measured")
    elif key in ("model_params", "state_bytes_per_gpu"):
        ok = _number(v) and 0 < v <= 1e16
        v = float(v) if ok else v
    elif key == "bytes_per_param":
        ok = _number(v) and 0 < v <= 64
        v = float(v) if ok else v
    elif key == "shard_gpus":
        ok = isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 10**8
    elif key == "gpu_phases":
        ok = isinstance(v, bool)
    elif key in POINT_KEYS:
        pts = _points(v)
        ok, v = pts is not None, pts if pts is not None else v
    elif key in ("comm_init_growth", "host_start_growth"):
        ok = v in ("linear", "log", "constant")
    elif key == "storage_read_gb_s":
        ok = _number(v) and 0 < v <= 1e9
        v = float(v) if ok else v
    else:
        raise ConfigError(file, key, "one of " + ", ".join(f.name for f in fields(TargetCluster)), v)
    if not ok:
        raise ConfigError(file, key, _expect(key), v)
    return v


def read_file(path: Path) -> dict[str, Any]:
    """A cluster TOML file's keys (flat), checked."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(str(path), "", "a readable TOML file", str(err)) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(str(path), "", "valid TOML", str(err)) from None
    return {k: _check(str(path), k, v) for k, v in raw.items()}


def parse_set(item: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with VALUE read as TOML (else as a string), checked."""
    key, text = split_setting(item)
    return key, _check("--set", key, toml_value(text.strip()))


def cluster(file: Path | None = None, sets: tuple[str, ...] = ()) -> TargetCluster:
    """The defaults, then the file's keys, then each ``--set``."""
    changes: dict[str, Any] = read_file(file) if file is not None else {}
    changes.update(parse_set(s) for s in sets)
    return replace(TargetCluster(), **changes)


def lines(c: TargetCluster) -> list[str]:
    """``key = value  (source)`` for each assumption, changed ones marked as set."""
    default = TargetCluster()
    out = []
    for f in fields(TargetCluster):
        v = getattr(c, f.name)
        src = SOURCES[f.name] if v == getattr(default, f.name) else "set by the user"
        shown = ", ".join(f"{x:,}" for x in v) if f.name == "gpus" else (f"{v:.4g}" if isinstance(v, float) else v)
        if f.name in POINT_KEYS:
            unit = "GPU" if f.name == "comm_init_at" else "host"
            shown = "; ".join(f"{n:,.0f} {unit}{'' if n == 1 else 's'}: {s:g} s" for n, s in v)
        shown = str(v).lower() if isinstance(v, bool) else shown
        shown = "unset" if v is None else shown
        out.append(f"{f.name} = {shown}  ({src})")
    return out
