"""The CI gate: a comparison against a baseline and absolute service levels, one verdict.

``gate`` exits 0 (pass), 1 (a regression, a newly failing point or a missed service
level) or 2 (insufficient data: not a pass). Service levels (``[[gate.slo]]``) are
checked on the candidate alone. The verdict is also written as JUnit XML for CI systems.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.results.compare import GateOptions, Row, compare_runs, run_differences
from bench.results.envcompare import compare_envs
from bench.results.reader import Run
from bench.results.stats import statistic
from bench.scenario.config import ConfigError
from bench.scenario.figures import outcomes_text
from bench.scenario.model import SLOSpec

PASS, REGRESSION, INSUFFICIENT = 0, 1, 2


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
        return status_of(
            failing=any(r.failing for r in self.rows) or any(not s.ok for s in self.slo_rows),
            insufficient=any(r.mark == "?" for r in self.rows),
            decided=any(r.mark != "x" for r in self.rows) or bool(self.slo_rows),
        )


def status_of(*, failing: bool, insufficient: bool, decided: bool) -> int:
    """The gate's rule, shared with ``ftbench calibrate`` so that both exit alike: a
    failure outweighs everything; then anything undecided, or nothing decided at all, is
    not a pass (a CI job that measured nothing must not go green)."""
    if failing:
        return REGRESSION
    if insufficient or not decided:
        return INSUFFICIENT
    return PASS


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
            rows.append(
                SloRow(
                    label=slo.point or "*",
                    slo=slo,
                    n=0,
                    value=math.nan,
                    ok=False,
                    note=f"no point's label contains {slo.point!r}",
                )
            )
        for p in matched:
            vals = run.values(p["point_hash"], slo.metric)
            value = statistic(vals, slo.stat)
            total = len(run.measured(p["point_hash"]))
            within = (slo.min is None or value >= slo.min) and (slo.max is None or value <= slo.max)
            ok = bool(vals) and len(vals) == total and within
            outcomes = outcomes_text(run.outcomes(p["point_hash"]))
            note = ""
            if total == 0:
                note = "no trials recorded for this point"
            elif len(vals) < total:
                note = f"{total - len(vals)} of {total} trials have no {slo.metric} (outcomes: {outcomes})"
            rows.append(SloRow(label=p["label"], slo=slo, n=len(vals), value=value, ok=ok, note=note))
    return rows


def gate(
    cand: Run,
    opts: GateOptions,
    *,
    base: Run | None = None,
    env_baseline: str | None = None,
    slos: Sequence[SLOSpec] = (),
) -> GateResult:
    """The whole gate: comparison against ``base``, or within ``cand`` of its other
    environments against ``env_baseline`` (if given), and service levels."""
    result = GateResult()
    if base is None and env_baseline is None and not slos:
        raise ConfigError(
            str(cand.path), "gate", "a baseline (--baseline or --env-baseline) or [[gate.slo]] service levels to check"
        )
    if base is not None:
        result.rows = compare_runs(base, cand, opts)
        result.messages += run_differences(base, cand)
    if env_baseline is not None:
        rows, messages = compare_envs(cand, env_baseline, opts)
        result.rows += rows
        result.messages += messages
    result.slo_rows = check_slos(cand, slos)
    return result


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


def junit_xml(result: GateResult, suite: str = "ftbench gate") -> str:
    """JUnit XML for CI systems: a test case per compared figure and per service level.
    Regressions and missed service levels are failures; insufficient data is an error
    (it is not a pass); points that cannot be compared are skipped."""
    import xml.etree.ElementTree as ET

    cases = []
    for r in result.rows:
        case = ET.Element("testcase", classname=f"ftbench.{r.label}", name=f"{r.metric} against baseline", time="0")
        detail = (
            f"{r.metric}: baseline median {r.base_median:.6g} (n={r.n_base}), candidate median "
            f"{r.cand_median:.6g} (n={r.n_cand}), ratio {r.ratio:.3g}, p={r.p:.3g}. {r.note}"
        ).strip()
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
            ET.SubElement(
                case, "failure", type="service level", message=f"{s.bound} is {s.value:.6g} (n={s.n}) {s.note}".strip()
            )
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
