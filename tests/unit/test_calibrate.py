"""Calibration's tolerance, confidence interval, printed table and launch modes (the three
verdicts: test_calibrate_verdict.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.calibrate.cases import CASES
from bench.calibrate.session import CalibrationReport, Tolerance, compare, format_table
from bench.results.stats import median_difference_ci
from bench.results.writer import RunDir


def test_the_tolerance_is_the_larger_of_absolute_and_relative() -> None:
    t = Tolerance(abs_s=0.005, rel=0.10)
    assert t.of(0.020) == 0.005 and t.of(5.0) == pytest.approx(0.5)


def test_verdicts_and_the_table(tmp_path: Path) -> None:
    case = CASES[0]
    bare = [0.020 + 0.0002 * i for i in range(15)]
    values = {
        (case.name, "bare", "first"): bare,
        (case.name, "ftbench", "first"): [v + 0.002 for v in bare],
        (case.name, "bare", "last"): bare,
        (case.name, "ftbench", "last"): [v + 0.030 for v in bare],
    }
    first, last = compare([case], values, Tolerance())
    assert first.agreement.verdict == "agrees" and first.diff_s == pytest.approx(0.002)
    assert first.ci.low <= 0.002 <= first.ci.high
    assert last.agreement.verdict == "disagrees" and last.diff_s == pytest.approx(0.030)
    report = CalibrationReport(rundir=RunDir(tmp_path), comparisons=[first, last], probes={})
    text = format_table(report, Tolerance())
    lines = text.splitlines()
    assert any("(ms)" in line for line in lines), "a units row"
    assert lines[-1] == "# Verdict : DISAGREES (exit 1): kill-ddp last"
    assert "DISAGREES" in text and "+30.00" in text


def test_the_difference_ci_is_seeded_and_covers_a_known_shift() -> None:
    x = [float(v) for v in range(20)]
    y = [v - 3 for v in x]
    a, b = median_difference_ci(x, y), median_difference_ci(x, y)
    assert (a.low, a.high) == (b.low, b.high)
    assert a.low <= 3 <= a.high


@pytest.mark.parametrize("mode", ["auto", "spawn", "forkserver", "forkserver-private"])
def test_a_case_runs_its_ftbench_side_in_the_launch_mode_asked(mode: str) -> None:
    for case in CASES:
        assert case.scenario(0, start_method=mode).launch.start_method == mode


def test_an_unknown_launch_mode_is_refused_by_name() -> None:
    from click.testing import CliRunner

    from bench.cli import cli

    result = CliRunner().invoke(cli, ["calibrate", "--start-method", "vfork"])
    assert result.exit_code == 2
    assert "--start-method" in result.output and "forkserver-private" in result.output
