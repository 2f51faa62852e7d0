"""Published figures for the coordinators ``ftbench scale`` measures, set beside
ftbench's figure at the same number of participants, with why the two differ.

The published figures were measured on clusters: one rank or agent per process, on as
many hosts, over a datacenter network. ftbench's are one machine's: every participant
and the coordinator share its cores, over loopback. What that changes is written per
anchor; the general rule: a coordinator that is CPU-bound (serialising, scanning) is
slower here, because its clients' work competes with it for the same two cores, and one
that is latency-bound (round trips) is faster, because loopback answers in microseconds
where a network takes tens to hundreds. Beyond the largest size measured, ftbench's
figure is the fitted model's extrapolation, and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from bench.scale.curves import Curve, curve
from bench.scale.rundir import ScaleRun

TUTORIAL = "https://pytorch.org/tutorials/intermediate/TCPStore_libuv_backend.html"
PR = "https://github.com/pytorch/pytorch/pull/124982"
NVRX = "https://nvidia.github.io/nvidia-resiliency-ext/inprocess/usage_guide.html#restart-latency"


@dataclass(frozen=True, slots=True)
class Anchor:
    what: str
    source: str
    coordinator: str
    op: str
    n: int
    published: str
    why: str
    """Why ftbench's figure differs (the measurement, not the result)."""
    published_s: float | None = None
    """The published figure in seconds, where it is one number."""
    check: bool = False
    """The model's cluster figure must land within a factor of 2 of it (else it is
    reported beside it: a figure whose conditions the model does not share)."""


ANCHORS: tuple[Anchor, ...] = (
    Anchor(
        what="TCPStore init, libuv server, 96K ranks",
        source=TUTORIAL,
        coordinator="tcpstore-libuv",
        op="connect",
        n=98_304,
        published="about 100 s (rank 0's TCPStore construction, all ranks connecting)",
        why="there, 96K processes on thousands of hosts connect over the network and rank 0 waits for all "
        "(wait_for_workers); here the clients are threads of a few processes on 2 cores over loopback, and the "
        "largest size this machine holds is far below 96K, so ftbench's figure is an extrapolation",
        published_s=100.0,
    ),
    Anchor(
        what="TCPStore init, legacy server, 96K ranks",
        source=TUTORIAL,
        coordinator="tcpstore-legacy",
        op="connect",
        n=98_304,
        published="timed out (over 30 min)",
        why="the legacy server polls every connection in one loop, which the tutorial's 96K clients overwhelmed; "
        "here the sweep stops far below 96K (the machine's limits), so the figure is an extrapolation",
    ),
    Anchor(
        what="torchelastic start, 4,000 hosts, after PR 124982 (373 s before)",
        source=PR,
        coordinator="rendezvous",
        op="form",
        n=4_000,
        published="10 s (whole torchelastic start: rendezvous, rank assignment, barrier)",
        why="the PR's figure is a whole job start on 4,000 hosts, each agent on its own CPU; here one round of "
        "the c10d rendezvous alone, all agents' Python (each pickles and writes the whole state with "
        "compare-and-set) sharing 2 cores, so the agents' CPU, not the store, bounds it",
        published_s=10.0,
        check=True,
    ),
    Anchor(
        what="NVRx in-process restart: TCPStore-based barrier, 16K ranks",
        source=NVRX,
        coordinator="nvrx",
        op="barrier",
        n=16_384,
        published="0.5 s",
        why="NVRx's ranks are processes on 2,048 hosts; here 16K client threads on 2 cores (where the "
        "machine's thread ids allow) over loopback",
        published_s=0.5,
        check=True,
    ),
    Anchor(
        what="NVRx in-process restart: execute rank_assignment (size not stated; the table's barrier is at 16K)",
        source=NVRX,
        coordinator="nvrx",
        op="restart",
        n=16_384,
        published="about 0.5 s",
        why="NVRx states no size for it; ftbench's restart is the iteration barrier, the terminated ranks read "
        "back and ShiftRanks, at 16K ranks",
        published_s=0.5,
    ),
)


def _value(c: Curve | None, n: int) -> tuple[str, str]:
    if c is None:
        return "", "not measured"
    v = c.at(n)
    if not math.isfinite(v):
        return "", ""
    text = f"{v:.3g} s" if v >= 0.01 else f"{v * 1e3:.3g} ms"
    if c.extrapolated(n):
        return text, f"extrapolated ({c.choice.fit.model}) from {c.max_n:,}"
    measured = c.y[c.n == n]
    if len(measured):
        return f"{float(measured.mean()):.3g} s", "measured"
    return text, f"fitted ({c.choice.fit.model}), within the sizes measured"


def table(run: ScaleRun) -> pd.DataFrame:
    """One row per anchor: the published figure, ftbench's at the same size (the time
    until every participant had its result) and why they differ."""
    rows = []
    for a in ANCHORS:
        value, how = _value(curve(run, a.coordinator, a.op, "all_s"), a.n)
        rows.append(
            {
                "published": a.what,
                "N": f"{a.n:,}",
                "their figure": a.published,
                "ftbench (this run)": value,
                "how": how,
                "coordinator / op": f"{a.coordinator} / {a.op}",
                "why they differ": a.why,
                "source": a.source,
            }
        )
    return pd.DataFrame(rows)
