"""Baseline against candidate, point by point: the verdict on each figure.

The rule (docs/design.md, "The regression gate"): a point regresses on a figure when the
candidate's median is worse than ``factor`` x the baseline's, by more than ``floor_s``,
and a two-sided Mann-Whitney U test gives p < ``alpha``, with at least ``min_trials``
values on each side; fewer is *insufficient*, which is not a pass. A trial that ended
badly where the baseline never did is a regression on its own. Which way is worse comes
from the figures table (:mod:`bench.scenario.figures`).

Marks, as asv prints them: ``+`` worse, ``-`` better, ``!`` newly failing, ``~`` past
the factor and the floor but not significant, ``x`` not comparable (a point or figure
the baseline lacks, or one neither side has, such as ``ttr_s`` of fail-stop), blank for
no change; and ``?`` insufficient: fewer than ``min_trials`` values on a side, or a
point or figure the baseline has and the candidate lacks (the gate cannot pass it).

Points are paired by ``point_hash``; points left over are paired by label (the same
scenario run with ``--set workload.pg_timeout_s=2`` and ``=3`` has the same labels but
different hashes), and a single point left on each side is paired with the other (the
same scenario with another strategy). The table says how each pair was made.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from bench.results.reader import Run, differences
from bench.results.stats import mann_whitney_u, median
from bench.scenario import figures
from bench.scenario.config import ConfigError, build, to_dict
from bench.scenario.figures import BAD_OUTCOMES, FAULT_FIGURES, outcomes_text
from bench.scenario.loader import check_figure
from bench.scenario.model import GateSpec


@dataclass(frozen=True, slots=True)
class GateOptions:
    """Thresholds of a comparison: the candidate scenario's ``[gate]`` table with the
    command line's overrides, and the figures to compare."""

    metrics: tuple[str, ...]
    factor: float
    floor_s: float
    alpha: float
    min_trials: int

    @classmethod
    def from_spec(
        cls,
        spec: GateSpec,
        *,
        metrics: Sequence[str] = (),
        factor: float | None = None,
        floor_s: float | None = None,
        alpha: float | None = None,
        min_trials: int | None = None,
    ) -> GateOptions:
        """Overrides are checked by the same rules as the table (its field bounds); an
        error names the option it came from."""
        chosen = tuple(metrics) or (spec.metric,)
        for m in chosen:
            check_figure(m, file="--metric", key="")
        given = {"factor": factor, "floor_s": floor_s, "alpha": alpha, "min_trials": min_trials}
        for key, value in given.items():
            if value is not None:
                try:
                    build(GateSpec, to_dict(spec) | {key: value}, file="", prefix="")
                except ConfigError as err:
                    raise ConfigError("--" + key.replace("_", "-"), "", err.expected, err.got) from None
        merged = {k: getattr(spec, k) if v is None else v for k, v in given.items()}
        return cls(
            metrics=chosen,
            factor=float(merged["factor"]),
            floor_s=float(merged["floor_s"]),
            alpha=float(merged["alpha"]),
            min_trials=int(merged["min_trials"]),
        )


@dataclass(frozen=True, slots=True)
class Pair:
    """A baseline point and the candidate point it is compared with (either may be absent)."""

    base: str | None
    cand: str | None
    label: str
    how: str
    """``hash``, ``label``, ``only`` (the one point left on each side) or ``-`` (unpaired)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: one figure of one pair of points."""

    label: str
    metric: str
    mark: str
    verdict: str
    n_base: int
    n_cand: int
    base_median: float
    cand_median: float
    ratio: float
    p: float
    how: str
    note: str = ""
    base_hash: str | None = None
    cand_hash: str | None = None

    @property
    def failing(self) -> bool:
        return self.mark in ("+", "!")


def pair_points(base: Run, cand: Run) -> list[Pair]:
    """Pair points by hash, then by label, then the single leftover of each side."""
    b_pts, c_pts = base.points(), cand.points()
    pairs: list[Pair] = []
    c_left = {p["point_hash"]: p for p in c_pts}
    b_left = []
    for p in b_pts:
        if p["point_hash"] in c_left:
            c_left.pop(p["point_hash"])
            pairs.append(Pair(p["point_hash"], p["point_hash"], p["label"], "hash"))
        else:
            b_left.append(p)
    still = []
    for p in b_left:
        match = next((c for c in c_left.values() if c["label"] == p["label"]), None)
        if match is not None:
            c_left.pop(match["point_hash"])
            pairs.append(Pair(p["point_hash"], match["point_hash"], p["label"], "label"))
        else:
            still.append(p)
    if len(still) == 1 and len(c_left) == 1:
        (c,) = c_left.values()
        pairs.append(Pair(still[0]["point_hash"], c["point_hash"], f"{still[0]['label']} / {c['label']}", "only"))
        still, c_left = [], {}
    pairs += [Pair(p["point_hash"], None, p["label"], "-") for p in still]
    pairs += [Pair(None, c["point_hash"], c["label"], "-") for c in c_left.values()]
    return pairs


def new_failures(base: Run, cand: Run, pair: Pair) -> str:
    """A note naming the bad outcomes the candidate has and the baseline never had."""
    if pair.base is None or pair.cand is None:
        return ""
    b, c = base.outcomes(pair.base), cand.outcomes(pair.cand)
    new = {k: v for k, v in c.items() if k in BAD_OUTCOMES and k not in b}
    if not new or not b:
        return ""
    return f"newly failing: {outcomes_text(new)} (baseline: {outcomes_text(b)})"


def compare_pair(base: Run, cand: Run, pair: Pair, metric: str, opts: GateOptions) -> Row:
    """The verdict on one figure of one pair; see the module docstring for the marks."""
    bv = base.values(pair.base, metric) if pair.base else []
    cv = cand.values(pair.cand, metric) if pair.cand else []
    row = Row(
        label=pair.label,
        metric=metric,
        mark=" ",
        verdict="no change",
        n_base=len(bv),
        n_cand=len(cv),
        base_median=median(bv),
        cand_median=median(cv),
        ratio=_ratio(median(cv), median(bv)),
        p=math.nan,
        how=pair.how,
        base_hash=pair.base,
        cand_hash=pair.cand,
    )
    failing = new_failures(base, cand, pair)
    if failing:
        return replace(row, mark="!", verdict="newly failing", note=failing)
    if pair.base is None or pair.cand is None:
        side = "baseline" if pair.cand is None else "candidate"
        if pair.cand is None:  # the candidate lost a point: it has no data for it
            return replace(row, mark="?", verdict="insufficient", note=f"point only in the {side}")
        return replace(row, mark="x", verdict="not comparable", note=f"point only in the {side}")
    if not bv and not cv:
        return replace(row, mark="x", verdict="not comparable", note=f"{metric} exists on neither side")
    if not cv:  # the baseline measured it, the candidate cannot say: not a pass
        outcomes = outcomes_text(cand.outcomes(pair.cand))
        return replace(
            row,
            mark="?",
            verdict="insufficient",
            note=f"the candidate has no {metric} (outcomes: {outcomes or 'none'})",
        )
    if not bv:
        return replace(row, mark="x", verdict="not comparable", note=f"{metric} does not exist in the baseline")
    if len(bv) < opts.min_trials or len(cv) < opts.min_trials:
        return replace(
            row,
            mark="?",
            verdict="insufficient",
            note=f"n={len(bv)}/{len(cv)}, the gate needs >= {opts.min_trials} per side",
        )
    p = mann_whitney_u(cv, bv).p
    row = replace(row, p=p)
    direction = _direction(metric, row.base_median, row.cand_median, opts)
    if direction == 0:
        return row
    if p >= opts.alpha:
        return replace(row, mark="~", verdict="not significant", note=f"p={p:.3g} >= alpha {opts.alpha:g}")
    return replace(row, mark="+" if direction > 0 else "-", verdict="regression" if direction > 0 else "improvement")


def _direction(metric: str, b: float, c: float, opts: GateOptions) -> int:
    """+1 if the candidate is worse past factor and floor, -1 if better, 0 otherwise
    (always 0 for a figure with no better side, such as loss_delta)."""
    if figures.figure(metric).better == "neither":
        return 0
    worse_up = not figures.higher_is_better(metric)
    hi, lo = (c, b) if worse_up else (b, c)  # the side that would be worse if larger
    if hi > opts.factor * lo and hi - lo > opts.floor_s:
        return 1
    if lo > opts.factor * hi and lo - hi > opts.floor_s:
        return -1
    return 0


def _ratio(c: float, b: float) -> float:
    if math.isnan(c) or math.isnan(b) or b == 0:
        return math.nan
    return c / b


def compare_runs(base: Run, cand: Run, opts: GateOptions) -> list[Row]:
    return [compare_pair(base, cand, pair, m, opts) for pair in pair_points(base, cand) for m in opts.metrics]


def run_differences(base: Run, cand: Run) -> list[str]:
    """What differs between the runs: versions, knobs, and each pair's configuration."""
    lines = []
    for key in ("versions", "knobs"):
        for d in differences(base.info.get(key) or {}, cand.info.get(key) or {}):
            lines.append(f"{key} {d}")
    for pair in pair_points(base, cand):
        if pair.base and pair.cand and pair.how != "hash":
            diff = differences(base.point_config(pair.base), cand.point_config(pair.cand))
            lines.append(f"{pair.label} (paired by {pair.how}): " + ("; ".join(diff) or "same configuration"))
    return lines


def format_rows(rows: Sequence[Row], opts: GateOptions) -> str:
    """An asv-style text table with a legend."""
    head = f"   {'baseline':>16} {'candidate':>16} {'ratio':>6} {'p':>8}  point [figure]"
    lines = [head]
    for r in rows:
        b = _num(r.base_median, r.n_base, r.metric)
        c = _num(r.cand_median, r.n_cand, r.metric)
        ratio = "" if math.isnan(r.ratio) else f"{r.ratio:.2f}"
        p = "" if math.isnan(r.p) else f"{r.p:.2g}"
        note = f"  ({r.note})" if r.note else ""
        lines.append(f"{r.mark}  {b:>16} {c:>16} {ratio:>6} {p:>8}  {r.label} [{r.metric}]{note}")
    lines.append(
        f"medians (n); gate: ratio > {opts.factor:g}, difference > {opts.floor_s:g}, p < {opts.alpha:g} "
        f"(two-sided Mann-Whitney U), n >= {opts.min_trials} a side"
    )
    lines.append(
        "marks: + worse  - better  ! newly failing  ~ not significant  x not comparable  ? insufficient trials"
    )
    return "\n".join(lines)


def _num(value: float, n: int, metric: str) -> str:
    if math.isnan(value):
        return f"- ({n})"
    unit = " s" if figures.unit(metric) == "s" else ""
    return f"{value:.4g}{unit} ({n})"


def default_metrics(base: Run, cand: Run) -> tuple[str, ...]:
    """Every figure either run has a value of: the fault figures, then the phases."""
    cols: list[str] = []
    for run in (base, cand):
        for c in run.figure_columns():
            if c not in cols:
                cols.append(c)
    return tuple([c for c in FAULT_FIGURES if c in cols] + [c for c in cols if c not in FAULT_FIGURES])
