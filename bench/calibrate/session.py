"""A calibration run: reference and ftbench trials interleaved, compared, stored like any run.

Trials alternate between the two paths (the reference first on even trials, ftbench
first on odd ones), so that a machine that slows down during the run slows both alike.
Per case and figure (the first and last survivor's detection; a restart case's recovery
figures too) the bootstrap 95 % interval of the difference of the medians decides against
the tolerance ``max(abs_s, rel x reference median)``: agrees, disagrees or cannot tell
(:mod:`bench.results.agreement`); the run exits as ``ftbench gate`` does on them.

The results directory holds both paths as points of one run (``path=bare``, ``user`` or
``blackbox``, and ``path=ftbench``), so ``ftbench report`` draws them side by side, and
``run.json`` holds the comparisons and the probes under ``calibration``. The reference
path is called ``bare`` inside this module, whichever it is.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import bench
from bench.calibrate import probes, user
from bench.calibrate.bare import BareLoop
from bench.calibrate.cases import DEFAULT_MOMENT, Case, Moment
from bench.calibrate.reference import Loop, ReferenceTrial, run_reference_trial
from bench.calibrate.user import UserLoop
from bench.procs import machine
from bench.procs.launcher import ProcessHost
from bench.results.agreement import (
    AGREES,
    BY_STATUS,
    CANNOT_TELL,
    DISAGREES,
    MIN_VALUES,
    WORDS,
    Agreement,
    judge,
    status,
)
from bench.results.gate import PASS, REGRESSION
from bench.results.stats import Interval, median, median_difference_ci
from bench.results.summary import point_stats
from bench.results.writer import RunDir
from bench.run.runner import context, record
from bench.run.trial import run_trial
from bench.scenario.loader import identity, points
from bench.scenario.model import Point

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True, slots=True)
class Tolerance:
    abs_s: float = 0.005
    rel: float = 0.10

    def of(self, bare_median: float, unit: str = "s") -> float:
        """The largest difference of medians that passes; for a count of steps, the
        absolute part is half a step (medians of whole steps), not ``abs_s``."""
        return max(self.abs_s if unit == "s" else 0.5, self.rel * bare_median)


@dataclass(frozen=True, kw_only=True, slots=True)
class Comparison:
    case: str
    figure: str
    bare: list[float]
    ftbench: list[float]
    tolerance_s: float
    diff_s: float
    ci: Interval
    unit: str = "s"
    """``s``, or ``steps`` (steps_lost): tolerance_s, diff_s and ci are in this unit."""

    @property
    def n(self) -> int:
        """Values on the smaller side: what the interval rests on."""
        return min(len(self.bare), len(self.ftbench))

    @property
    def agreement(self) -> Agreement:
        return judge(self.diff_s, self.ci.low, self.ci.high, self.tolerance_s, self.n)


@dataclass
class CalibrationReport:
    rundir: RunDir
    comparisons: list[Comparison]
    probes: dict[str, Any]
    status: str = "complete"
    values: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)

    @property
    def exit_status(self) -> int:
        """The exit status, as ``ftbench gate``'s: 0 all agree, 1 any disagrees, 2 none
        disagrees but some cannot tell (or nothing was compared)."""
        return status([c.agreement.verdict for c in self.comparisons])


def calibrate(
    cases: Sequence[Case],
    *,
    trials: int,
    out: str | Path,
    tolerance: Tolerance,
    seed: int = 0,
    start_method: str = "auto",
    moment: Moment = DEFAULT_MOMENT,
    progress: Progress = lambda _line: None,
    argv: list[str] | None = None,
) -> CalibrationReport:
    rundir = RunDir.create(out, "calibrate", machine.commit())
    pts = {
        c.name: replace(
            points(c.scenario(seed, start_method=start_method, moment=moment))[0], label=f"case={c.name} path=ftbench"
        )
        for c in cases
    }
    boxes = {
        c.name: replace(
            points(c.blackbox(seed, moment=moment, script=str(user.SCRIPT)))[0],
            label=f"case={c.name} path=blackbox",
        )
        for c in cases
        if c.reference == "blackbox"
    }
    info: dict[str, Any] = {
        "suite": "ftbench",
        "version": bench.__version__,
        "commit": machine.commit(),
        "kind": "calibration",
        "created": _now(),
        "command": argv or [],
        "clock": machine.clock(),
        "knobs": machine.knobs(),
        "trials": trials,
        "status": "running",
        "scenario": {"name": "calibrate", "description": "ftbench against bare torch.distributed", "raw": {}},
        "points": [p for c in cases for p in _points(c, pts[c.name], boxes.get(c.name))],
    }
    rundir.write_run_json(info)
    report = CalibrationReport(rundir=rundir, comparisons=[], probes={}, status="interrupted")
    try:
        with ProcessHost() as host:
            info["versions"], info["machine"] = machine.versions(), machine.host()
            progress("probes: injection stamp to delivery, cost of one event")
            report.probes = probes.measure()
            for trial in range(trials):
                for i, case in enumerate(cases):
                    paths = ("bare", "ftbench") if (trial + i) % 2 == 0 else ("ftbench", "bare")
                    for path in paths:
                        point = boxes[case.name] if path == "bare" and case.name in boxes else pts[case.name]
                        found = _one(path, case, point, host, rundir, trial, seed, moment)
                        for key, value in found.items():
                            report.values.setdefault((case.name, path, key), []).append(value)
                        shown = path if path == "ftbench" else case.reference
                        figures = "  ".join(f"{k} {_show(k, v)}" for k, v in found.items())
                        progress(f"[{trial + 1}/{trials}] {case.name:<15} {shown:<8} {figures}")
        report.status = "complete"
    finally:
        report.comparisons = compare(cases, report.values, tolerance)
        info.update(
            status=report.status,
            finished=_now(),
            stats=point_stats(rundir.rows()),
            calibration={
                "start_method": start_method,
                "moment": moment.trigger(),
                "tolerance": {"abs_s": tolerance.abs_s, "rel": tolerance.rel},
                "probes": report.probes,
                "comparisons": [_jsonable(c) for c in report.comparisons],
                "verdict": BY_STATUS[report.exit_status],
                "exit_status": report.exit_status,
            },
        )
        rundir.write_run_json(info)
    return report


def _one(
    path: str, case: Case, point: Point, host: ProcessHost, rundir: RunDir, trial: int, seed: int, moment: Moment
) -> dict[str, float]:
    """One trial of one path: the case's figures (s, or steps). The path ``bare`` is
    the case's reference, whichever it is: a loop of its own, or a black-box job
    (``point`` is then the command job's)."""
    if path == "ftbench" or case.reference == "blackbox":
        result = run_trial(context(point, trial, host, rundir, "gloo", fault_free=False))
        record(rundir, point, trial, "gloo", result, reference=False)
        if result.outcome == "interrupted":
            raise KeyboardInterrupt
        figures = result.faults[0].figures
        return {key: figures[column] for key, column in case.figures}
    started = time.monotonic()
    trial_dir = rundir.path / "events" / _bare_hash(point)[:12] / str(trial)
    loop: Loop = UserLoop(case, trial_dir, seed=seed) if case.reference == "user" else BareLoop(case, moment, trial_dir)
    bare = run_reference_trial(case, loop, moment=moment, seed=seed, trial=trial)
    rundir.add_rows([_bare_row(case, point, trial, seed, bare, time.monotonic() - started)])
    return {"first": bare.first_s, "last": bare.last_s}


def compare(
    cases: Sequence[Case], values: dict[tuple[str, str, str], list[float]], tolerance: Tolerance
) -> list[Comparison]:
    out = []
    for case in cases:
        for key, column in case.figures:
            b = [v for v in values.get((case.name, "bare", key), []) if not math.isnan(v)]
            f = [v for v in values.get((case.name, "ftbench", key), []) if not math.isnan(v)]
            if not b and not f:
                continue  # not measured at all (an interrupted run): nothing to show
            # A side without the figure stays as a row that cannot tell: dropped, a case
            # whose ftbench side never detected would leave the others to decide alone.
            unit = "steps" if column == "steps_lost" else "s"
            out.append(
                Comparison(
                    case=case.name,
                    figure=key,
                    bare=b,
                    ftbench=f,
                    tolerance_s=tolerance.of(median(b) if b else 0.0, unit),
                    diff_s=median(f) - median(b),
                    ci=median_difference_ci(f, b),
                    unit=unit,
                )
            )
    return out


def format_table(report: CalibrationReport, tolerance: Tolerance) -> str:
    """A fixed-width table with a units row and a final verdict, as nccl-tests prints;
    the verdict's words and the rows it names follow ``ftbench gate``'s last line."""
    head = (
        f"{'case':<22}{'figure':<11}{'n':>4}{'reference':>10}{'ftbench':>10}{'diff':>10}"
        f"{'95% CI of diff':>22}{'tolerance':>11}  verdict"
    )
    units = f"{'':<22}{'':<11}{'':>4}{'(ms)':>10}{'(ms)':>10}{'(ms)':>10}{'(ms)':>22}{'(ms)':>11}"
    lines = [
        "# medians over the trials that have the figure; diff = ftbench - reference; steps_lost in steps",
        "# reference: bare_rank.py (ftbench's workload without ftbench); for *-user cases examples/ddp/train.py;",
        "# for *-blackbox cases that script run as a command job, watched from outside",
        "# verdict: agrees when the whole CI lies within +-tolerance, disagrees when it lies wholly beyond,",
        f"# cannot tell otherwise (or with fewer than {MIN_VALUES} values a side)",
        head,
        units,
    ]
    for c in report.comparisons:
        k = 1e3 if c.unit == "s" else 1.0
        ci = f"[{c.ci.low * k:+.1f}, {c.ci.high * k:+.1f}]" if c.ci.exists else "-"
        a = c.agreement
        verdict = a.verdict.upper() if a.verdict == DISAGREES else a.verdict
        verdict += f" ({a.note()})" if a.note() else ""
        lines.append(
            f"{c.case:<22}{c.figure:<11}{c.n:>4}{_number(median(c.bare) * k, '10.2f')}"
            f"{_number(median(c.ftbench) * k, '10.2f')}{_number(c.diff_s * k, '+10.2f')}{ci:>22}"
            f"{c.tolerance_s * k:>11.2f}  {verdict}"
        )
    p = report.probes
    if p:
        lines.append("# instruments (median / max)")
        for key, title in (
            ("sigkill_stamp_to_gone", "SIGKILL: stamp to process gone"),
            ("sigstop_stamp_to_stopped", "SIGSTOP: stamp to process stopped"),
            ("event_emit", "one event written"),
        ):
            lines.append(f"#   {title:<36}{p[key]['median_s'] * 1e6:>9.1f} us {p[key]['max_s'] * 1e6:>9.1f} us")
    lines.append(f"# tolerance: max({tolerance.abs_s * 1e3:g} ms, {tolerance.rel:.0%} of the reference median)")
    verdicts = [c.agreement.verdict for c in report.comparisons]
    counts = ((AGREES, "agree"), (DISAGREES, "disagree"), (CANNOT_TELL, "cannot tell"))
    lines.append("# rows: " + ", ".join(f"{verdicts.count(v)} {words}" for v, words in counts))
    lines.append(verdict_line(report))
    return "\n".join(lines)


def verdict_line(report: CalibrationReport) -> str:
    """The run's verdict and the rows that made it, as ``ftbench gate``'s last line names
    the points that failed it."""
    code = report.exit_status
    deciding = DISAGREES if code == REGRESSION else CANNOT_TELL
    named = [f"{c.case} {c.figure}" for c in report.comparisons if c.agreement.verdict == deciding]
    if code == PASS:
        return f"# Verdict : {WORDS[code]} (exit {code})"
    return f"# Verdict : {WORDS[code]} (exit {code}): " + ("; ".join(named) or "nothing compared")


def _number(v: float, spec: str) -> str:
    """A fixed-width number, or "-" where a side has no value."""
    width = int(spec.lstrip("+").split(".")[0])
    return f"{'-':>{width}}" if math.isnan(v) else f"{v:>{spec}}"


def _points(case: Case, point: Point, box: Point | None) -> list[dict[str, Any]]:
    config = identity(point.scenario)
    ftbench = {
        "point_hash": point.point_hash,
        "label": point.label,
        "values": {"case": case.name, "path": "ftbench"},
        "config": config,
    }
    if box is not None:
        return [
            {
                "point_hash": box.point_hash,
                "label": box.label,
                "values": {"case": case.name, "path": "blackbox"},
                "config": identity(box.scenario),
            },
            ftbench,
        ]
    return [
        {
            "point_hash": _bare_hash(point),
            "label": f"case={case.name} path={case.reference}",
            "values": {"case": case.name, "path": case.reference},
            "config": config | {"path": case.reference},
        },
        {
            "point_hash": point.point_hash,
            "label": point.label,
            "values": {"case": case.name, "path": "ftbench"},
            "config": config,
        },
    ]


def _bare_hash(point: Point) -> str:
    return hashlib.sha256(f"bare:{point.point_hash}".encode()).hexdigest()


def _bare_row(case: Case, point: Point, trial: int, seed: int, bare: ReferenceTrial, wall_s: float) -> dict[str, Any]:
    detected = not math.isnan(bare.first_s)
    return {
        "point_hash": _bare_hash(point),
        "label": f"case={case.name} path={case.reference}",
        "strategy": case.reference,
        "workload": case.workload,
        "backend": "gloo",
        "world_size": case.world_size,
        "fault": case.fault,
        "fault_index": 0,
        "target": str(case.victim),
        "interposer": "none",
        "trial": trial,
        "seed": seed,
        "mechanism": "signal SIGKILL" if case.fault == "kill" else "signal SIGSTOP",
        "reference": False,
        "ttd_s": bare.first_s,
        "ttd_rank_s": bare.first_s,
        "ttd_all_s": bare.last_s,
        "outcome": "failed" if detected else "hung",
        "error": bare.error,
        "ff_step_s": bare.step_s,
        "inject_after_s": bare.since_start_s,
        "trial_wall_s": wall_s,
    }


def _jsonable(c: Comparison) -> dict[str, Any]:
    return {
        "case": c.case,
        "figure": c.figure,
        "n_bare": len(c.bare),
        "n_ftbench": len(c.ftbench),
        "bare_median_s": median(c.bare),
        "ftbench_median_s": median(c.ftbench),
        "diff_s": c.diff_s,
        "ci_low_s": c.ci.low,
        "ci_high_s": c.ci.high,
        "tolerance_s": c.tolerance_s,
        "unit": c.unit,
        "verdict": c.agreement.verdict,
        "trials_to_decide": c.agreement.trials,
        "verdict_note": c.agreement.note(),
    }


def _show(key: str, v: float) -> str:
    if math.isnan(v):
        return "-"
    return f"{v:.0f}" if key == "steps_lost" else f"{v * 1e3:8.2f} ms"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
