"""From a scale run's rows to curves: per coordinator and operation, the latency against
the number of participants, a growth model chosen by the shared rule
(:func:`bench.scale.growth.choose`, relative errors, every repetition a point), and the
number of participants at which the fitted curve crosses 1 s, 10 s and 60 s.

Three figures per point: ``p50_s`` and ``p95_s`` over the participants, and ``all_s``,
when the last participant had its result (what a recovery waits for). A crossing at or
below the largest size measured is read between measurements; above it, it is an
extrapolation of the fitted model, and says so. A curve that never reaches a threshold
below 10^9 participants has no crossing (an empty cell).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bench.scale.coordinators import COORDINATORS
from bench.scale.growth import Choice, choose, crossing
from bench.scale.rundir import ScaleRun

STATS = ("p50_s", "p95_s", "all_s")
THRESHOLDS = (1.0, 10.0, 60.0)


@dataclass
class Curve:
    coordinator: str
    op: str
    stat: str
    n: np.ndarray
    y: np.ndarray
    choice: Choice
    crossings: dict[float, float | None] = field(default_factory=dict)

    @property
    def max_n(self) -> int:
        return int(self.n.max())

    @property
    def unit(self) -> str:
        return COORDINATORS[self.coordinator].unit if self.coordinator in COORDINATORS else "participant"

    def at(self, n: float) -> float:
        return self.choice.fit.predict(n)

    def extrapolated(self, n: float) -> bool:
        return n > self.max_n

    def describe(self) -> str:
        return self.choice.fit.describe("N")


def curve(run: ScaleRun, coordinator: str, op: str, stat: str = "all_s") -> Curve | None:
    """The fitted curve of one operation's figure, or None without two sizes measured."""
    df = run.ok()
    rows = df[(df["coordinator"] == coordinator) & (df["op"] == op)]
    rows = rows[pd.to_numeric(rows[stat], errors="coerce").notna()]
    if rows.empty:
        return None
    n = rows["n"].to_numpy(dtype=float)
    y = rows[stat].to_numpy(dtype=float)
    c = Curve(coordinator, op, stat, n, y, choose(n.tolist(), y.tolist(), relative=True))
    for t in THRESHOLDS:
        c.crossings[t] = crossing(c.choice.fit, t)
    return c


def all_curves(run: ScaleRun, stats: tuple[str, ...] = ("p50_s", "p95_s")) -> list[Curve]:
    out = []
    for (coordinator, op), _ in run.records.groupby(["coordinator", "op"], sort=False):
        for stat in stats:
            c = curve(run, str(coordinator), str(op), stat)
            if c is not None:
                out.append(c)
    return out


def _seconds(v: float) -> str:
    if not np.isfinite(v):
        return ""
    if v < 1e-3:
        return f"{v * 1e6:.0f} µs"
    if v < 1:
        return f"{v * 1e3:.3g} ms"
    return f"{v:.3g} s"


def _bytes(v: float) -> str:
    if not np.isfinite(v):
        return ""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(v) < 1000:
            return f"{v:.3g} {unit}"
        v /= 1000
    return f"{v:.3g} TB"


def _spread(values: pd.Series) -> str:
    """The median over repetitions, and their range where there are several (two
    repetitions can disagree by a factor of ten: a median alone would hide which)."""
    v = values.astype(float)
    if len(v) < 2:
        return _seconds(float(v.median()))
    return f"{_seconds(float(v.median()))} ({_seconds(float(v.min()))}–{_seconds(float(v.max()))})"


def points_table(run: ScaleRun) -> pd.DataFrame:
    """Per coordinator, operation and size: the medians over repetitions of p50, p95 and
    all (with its range), the coordinator's CPU seconds and bytes out, the participants'
    CPU seconds."""
    df = run.ok()
    rows = []
    for (coordinator, op, n), g in df.groupby(["coordinator", "op", "n"], sort=False):
        rows.append(
            {
                "coordinator": coordinator,
                "op": op,
                "N": f"{int(str(n)):,}",
                "reps": len(g),
                "p50": _seconds(float(g["p50_s"].median())),
                "p95": _seconds(float(g["p95_s"].median())),
                "all": _spread(g["all_s"]),
                "coordinator CPU": _seconds(float(g["server_cpu_s"].median())),
                "bytes out": _bytes(float(g["sent_bytes"].median())),
                "participants' CPU": _seconds(float(g["client_cpu_s"].median())),
            }
        )
    return pd.DataFrame(rows)


def _cross(c: Curve, t: float) -> str:
    x = c.crossings.get(t)
    if x is None:
        return ""
    if x <= c.n.min():
        return f"<= {int(c.n.min()):,} (already at the smallest size)"
    where = "extrapolated" if c.extrapolated(x) else "measured range"
    return f"{x:,.0f} ({where})"


def fits_table(curves: list[Curve]) -> pd.DataFrame:
    """Per curve: the model chosen and why, the largest size measured, the crossings."""
    rows = []
    for c in curves:
        row: dict[str, object] = {
            "coordinator": c.coordinator,
            "op": c.op,
            "figure": c.stat.removesuffix("_s"),
            "model": c.describe(),
            "measured up to": f"{c.max_n:,}",
        }
        row.update({f"N at {t:g} s": _cross(c, t) for t in THRESHOLDS})
        row["why this model"] = c.choice.reason
        rows.append(row)
    return pd.DataFrame(rows)
