"""Whether a point fits the machine's memory, estimated before anything is launched.

A point that cannot fit fails at run time in whatever way the kernel's OOM killer picks
(a rank SIGKILLed mid-step looks like a fault nobody injected). So ``validate`` adds up
what each rank will hold (its workload's declared estimate, :attr:`WorkloadPlugin.memory`,
plus an idle rank's interpreter and torch) and refuses a point whose ranks would not fit
in this machine's memory, naming the estimate, its parts and the limit.

The estimate is deliberately simple (parameters, gradients, optimizer state, buffers and
a batch's activations, each counted once per rank), so it errs low rather than high: it
is there to stop the sizes that cannot possibly fit (``hidden = 1e9``, a 4 PB
all_reduce), not to predict a peak to the megabyte. All ranks of a point are counted
against this machine: on one machine every host of a point is here; under
``--agents-at`` the hosts are the cluster's, which this check cannot see.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from bench.scenario.config import ConfigError
from bench.scenario.workload import WORKLOADS, WorkloadPlugin

if TYPE_CHECKING:
    from bench.scenario.model import Scenario

RANK_BASE_BYTES = 400e6
"""An idle rank: the interpreter, torch and ftbench (a rank of a 135 kB model peaks at
about 380 MB resident with torch 2.13's CPU build, measured with ``measure.resources``)."""
STORE_BYTES = 250e6
"""The trial's store process (an interpreter with torch imported)."""
HEADROOM = 0.9
"""Share of the limit a point may plan to use: the harness and the system need the rest."""


@functools.lru_cache(maxsize=1)
def machine_limit() -> tuple[float, str]:
    """The memory this machine gives a run, and what that is: the smaller of MemTotal
    and the memory cgroup's limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``).
    Read once per process: every point of a sweep is checked against it, and three
    file reads a point were a fifth of ``validate``'s time on a large sweep."""
    limit, what = math.inf, "no limit found"
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    limit, what = float(line.split()[1]) * 1024, "MemTotal"
    except OSError:
        pass
    for path, name in (
        ("/sys/fs/cgroup/memory.max", "the cgroup's memory.max"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "the cgroup's memory.limit_in_bytes"),
    ):
        try:
            text = open(path).read().strip()  # noqa: SIM115 (one read)
        except OSError:
            continue
        if text.isdigit() and float(text) < limit:
            limit, what = float(text), name
    return limit, what


def check(s: Scenario, file: str) -> None:
    """ConfigError when the point's ranks cannot fit this machine's memory."""
    declared = WORKLOADS[s.workload.kind]
    if not isinstance(declared, WorkloadPlugin) or declared.memory is None:
        return
    est = declared.memory(s.workload.params, s.workload.world_size)
    per_rank = RANK_BASE_BYTES + est.total
    ranks = s.workload.world_size
    need = per_rank * ranks + STORE_BYTES
    limit, what = machine_limit()
    if need <= HEADROOM * limit:
        return
    parts = ", ".join(f"{k} {_size(v)}" for k, v in est.parts.items() if v >= 1e6)
    raise ConfigError(
        file,
        f"workload.{est.knob}",
        f"a size whose ranks fit this machine: about {_size(per_rank)} per rank (an idle rank "
        f"{_size(RANK_BASE_BYTES)}{', ' + parts if parts else ''}) x {ranks} ranks + the store = {_size(need)}, "
        f"over {HEADROOM:.0%} of {what} ({_size(limit)})",
        getattr(s.workload.params, est.knob, None),
    )


def _size(v: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(v) < 1000:
            return f"{v:.3g} {unit}"
        v /= 1000
    return f"{v:.3g} PB"
