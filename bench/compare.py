"""Baseline against candidate, point by point: the comparison table and the CI gate.

The rule (DESIGN.md "Regression gate"): a point regresses on a figure when the
candidate's median is above ``factor`` x the baseline's, above it by more than
``floor_s``, and a two-sided Mann-Whitney U test gives p < ``alpha``, with at least
``min_trials`` values on each side; fewer is *insufficient*, which is not a pass. A
trial that ended badly where the baseline never did is a regression on its own.

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
from dataclasses import dataclass, field, replace

from bench.config import ConfigError
from bench.metrics import FIGURES, is_figure
from bench.rundata import Run, differences
from bench.scenario import GateSpec, SLOSpec
from bench.stats import mann_whitney_u, median, statistic

#: Figures where more is better; every other figure is a cost (seconds, steps, ratios).
HIGHER_IS_BETTER = frozenset({"goodput"})
#: Outcomes that mean the trial did not end well; one the baseline never had is ``!``.
BAD_OUTCOMES = ("failed", "hung", "corrupted", "not_injected")

PASS, REGRESSION, INSUFFICIENT = 0, 1, 2


@dataclass(frozen=True, slots=True)
class GateOptions:
    """Thresholds of the gate: the scenario's ``[gate]`` table, overridable by flags."""

    metrics: tuple[str, ...]
    factor: float
    floor_s: float
    alpha: float
    min_trials: int

    @classmethod
    def from_spec(cls, spec: GateSpec, *, metrics: Sequence[str] = (), factor: float | None = None,
                  floor_s: float | None = None, alpha: float | None = None,
                  min_trials: int | None = None) -> GateOptions:
        chosen = tuple(metrics) or (spec.metric,)
        for m in chosen:
            if not is_figure(m):
                raise ConfigError("--metric", "", f"a figure ({', '.join(FIGURES)}, or phase_<name>_s)", m)
        opts = cls(metrics=chosen, factor=spec.factor if factor is None else factor,
                   floor_s=spec.floor_s if floor_s is None else floor_s,
                   alpha=spec.alpha if alpha is None else alpha,
                   min_trials=spec.min_trials if min_trials is None else min_trials)
        if opts.factor < 1.0:
            raise ConfigError("--factor", "", "a number >= 1.0", opts.factor)
        if not 0.0 < opts.alpha < 1.0:
            raise ConfigError("--alpha", "", "a number in (0, 1)", opts.alpha)
        if opts.floor_s < 0:
            raise ConfigError("--floor-s", "", "a number >= 0", opts.floor_s)
        if opts.min_trials < 2:
            raise ConfigError("--min-trials", "", "an integer >= 2", opts.min_trials)
        return opts


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


@dataclass(frozen=True, slots=True)
class SloRow:
    """One service-level check of one point."""

    label: str
    slo: SLOSpec
    n: int
    value: float
    ok: bool
    note: str = ""

    @property
    def bound(self) -> str:
        lo = "" if self.slo.min is None else f"{self.slo.min:g} <= "
        hi = "" if self.slo.max is None else f" <= {self.slo.max:g}"
        return f"{lo}{self.slo.stat}({self.slo.metric}){hi}"


@dataclass
class GateResult:
    rows: list[Row] = field(default_factory=list)
    slo_rows: list[SloRow] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    @property
    def status(self) -> int:
        """0 pass, 1 regression (or a service level missed), 2 insufficient data."""
        if any(r.failing for r in self.rows) or any(not s.ok for s in self.slo_rows):
            return REGRESSION
        if any(r.mark == "?" for r in self.rows):
            return INSUFFICIENT
        compared = [r for r in self.rows if r.mark != "x"]
        if not compared and not self.slo_rows:
            return INSUFFICIENT
        return PASS


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
    was = ", ".join(f"{k} {v}" for k, v in sorted(b.items()))
    return "newly failing: " + ", ".join(f"{k} {v}" for k, v in sorted(new.items())) + f" (baseline: {was})"


def compare_pair(base: Run, cand: Run, pair: Pair, metric: str, opts: GateOptions) -> Row:
    """The verdict on one figure of one pair; see the module docstring for the marks."""
    bv = base.values(pair.base, metric) if pair.base else []
    cv = cand.values(pair.cand, metric) if pair.cand else []
    row = Row(label=pair.label, metric=metric, mark=" ", verdict="no change", n_base=len(bv), n_cand=len(cv),
              base_median=median(bv), cand_median=median(cv), ratio=_ratio(median(cv), median(bv)),
              p=math.nan, how=pair.how, base_hash=pair.base, cand_hash=pair.cand)
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
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(cand.outcomes(pair.cand).items()))
        return replace(row, mark="?", verdict="insufficient",
                       note=f"the candidate has no {metric} (outcomes: {outcomes or 'none'})")
    if not bv:
        return replace(row, mark="x", verdict="not comparable", note=f"{metric} does not exist in the baseline")
    if len(bv) < opts.min_trials or len(cv) < opts.min_trials:
        return replace(row, mark="?", verdict="insufficient",
                       note=f"n={len(bv)}/{len(cv)}, the gate needs >= {opts.min_trials} per side")
    p = mann_whitney_u(cv, bv).p
    row = replace(row, p=p)
    direction = _direction(metric, row.base_median, row.cand_median, opts)
    if direction == 0:
        return row
    if p >= opts.alpha:
        return replace(row, mark="~", verdict="not significant", note=f"p={p:.3g} >= alpha {opts.alpha:g}")
    return replace(row, mark="+" if direction > 0 else "-", verdict="regression" if direction > 0 else "improvement")


def _direction(metric: str, b: float, c: float, opts: GateOptions) -> int:
    """+1 if the candidate is worse past factor and floor, -1 if better, 0 otherwise."""
    worse_up = metric not in HIGHER_IS_BETTER
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


def check_slos(run: Run, slos: Sequence[SLOSpec]) -> list[SloRow]:
    """Absolute service levels on one run. Every trial of a point must have the figure:
    a trial without it (a stall nobody detected, a job that never recovered) misses a
    service level on that figure, and so does a point with no value at all, so that a
    measurement that produced nothing cannot pass. Use the entry's ``point`` filter to
    keep a service level away from points where the figure does not apply."""
    rows = []
    for slo in slos:
        matched = [p for p in run.points() if slo.point is None or slo.point in p["label"]]
        if not matched:
            rows.append(SloRow(label=slo.point or "*", slo=slo, n=0, value=math.nan, ok=False,
                               note=f"no point's label contains {slo.point!r}"))
        for p in matched:
            vals = run.values(p["point_hash"], slo.metric)
            value = statistic(vals, slo.stat)
            total = len(run.measured(p["point_hash"]))
            within = (slo.min is None or value >= slo.min) and (slo.max is None or value <= slo.max)
            ok = bool(vals) and len(vals) == total and within
            outcomes = ", ".join(f"{k} {v}" for k, v in sorted(run.outcomes(p["point_hash"]).items()))
            note = ""
            if total == 0:
                note = "no trials recorded for this point"
            elif len(vals) < total:
                note = f"{total - len(vals)} of {total} trials have no {slo.metric} (outcomes: {outcomes})"
            rows.append(SloRow(label=p["label"], slo=slo, n=len(vals), value=value, ok=ok, note=note))
    return rows


def gate(cand: Run, opts: GateOptions, *, base: Run | None = None, slos: Sequence[SLOSpec] = ()) -> GateResult:
    """The whole gate: comparison against ``base`` (if given) and service levels."""
    result = GateResult()
    if base is None and not slos:
        raise ConfigError(str(cand.path), "gate", "a baseline (--baseline) or [[gate.slo]] service levels to check")
    if base is not None:
        result.rows = compare_runs(base, cand, opts)
        result.messages += run_differences(base, cand)
    result.slo_rows = check_slos(cand, slos)
    return result


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
    lines.append(f"medians (n); gate: ratio > {opts.factor:g}, difference > {opts.floor_s:g}, p < {opts.alpha:g} "
                 f"(two-sided Mann-Whitney U), n >= {opts.min_trials} a side")
    lines.append("marks: + worse  - better  ! newly failing  ~ not significant  x not comparable  "
                 "? insufficient trials")
    return "\n".join(lines)


def format_slos(rows: Sequence[SloRow]) -> str:
    lines = [f"   {'value':>10} {'n':>3}  service level  point"]
    for s in rows:
        value = "-" if math.isnan(s.value) else f"{s.value:.4g}"
        note = f"  ({s.note})" if s.note else ""
        lines.append(f"{'ok' if s.ok else 'XX'} {value:>10} {s.n:>3}  {s.bound}  {s.label}{note}")
    return "\n".join(lines)


def verdict_line(result: GateResult) -> str:
    status = result.status
    failing = [f"{r.label} [{r.metric}]" for r in result.rows if r.failing]
    failing += [f"{s.label} [{s.bound}]" for s in result.slo_rows if not s.ok]
    if status == REGRESSION:
        return "gate: REGRESSION in " + "; ".join(failing)
    if status == INSUFFICIENT:
        short = [f"{r.label} [{r.metric}]" for r in result.rows if r.mark == "?"]
        return "gate: INSUFFICIENT DATA" + (" for " + "; ".join(short) if short else ": nothing comparable")
    return "gate: pass"


def _num(value: float, n: int, metric: str) -> str:
    if math.isnan(value):
        return f"- ({n})"
    unit = " s" if metric.endswith("_s") else ""
    return f"{value:.4g}{unit} ({n})"


def junit_xml(result: GateResult, suite: str = "ftbench gate") -> str:
    """JUnit XML for CI systems: a test case per compared figure and per service level.
    Regressions and missed service levels are failures; insufficient data is an error
    (it is not a pass); points that cannot be compared are skipped."""
    import xml.etree.ElementTree as ET

    cases = []
    for r in result.rows:
        case = ET.Element("testcase", classname=f"ftbench.{r.label}", name=f"{r.metric} against baseline", time="0")
        detail = (f"{r.metric}: baseline median {r.base_median:.6g} (n={r.n_base}), candidate median "
                  f"{r.cand_median:.6g} (n={r.n_cand}), ratio {r.ratio:.3g}, p={r.p:.3g}. {r.note}").strip()
        if r.failing:
            ET.SubElement(case, "failure", type=r.verdict, message=f"{r.verdict}: {r.label} [{r.metric}]").text = detail
        elif r.mark == "?":
            ET.SubElement(case, "error", type="insufficient", message=f"insufficient data: {r.note}").text = detail
        elif r.mark == "x":
            ET.SubElement(case, "skipped", message=f"not comparable: {r.note}")
        cases.append(case)
    for s in result.slo_rows:
        case = ET.Element("testcase", classname=f"ftbench.{s.label}", name=f"service level {s.bound}", time="0")
        if not s.ok:
            ET.SubElement(case, "failure", type="service level",
                          message=f"{s.bound} is {s.value:.6g} (n={s.n}) {s.note}".strip())
        cases.append(case)
    failures = sum(1 for c in cases if c.find("failure") is not None)
    errors = sum(1 for c in cases if c.find("error") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": str(errors), "skipped": str(skipped)}
    root = ET.Element("testsuites", {"name": suite, **counts})
    ts = ET.SubElement(root, "testsuite", {"name": suite, "time": "0", **counts})
    ts.extend(cases)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def default_metrics(base: Run, cand: Run) -> tuple[str, ...]:
    """Every figure either run has a value of: the DESIGN figures, then the phases."""
    cols: list[str] = []
    for run in (base, cand):
        df = run.measured()
        if df.empty:
            continue
        for c in [*FIGURES, *run.phase_columns()]:
            if c in df and df[c].notna().any() and c not in cols:
                cols.append(c)
    return tuple([c for c in FIGURES if c in cols] + [c for c in cols if c not in FIGURES])
