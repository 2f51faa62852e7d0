"""Calibration's three verdicts (issue 46): the interval of the difference decides, not
where the median fell, and the run exits as ``ftbench gate`` does on them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.calibrate.cases import BY_NAME
from bench.calibrate.session import CalibrationReport, Tolerance, compare, format_table
from bench.report.tables import calibration
from bench.results.agreement import AGREES, CANNOT_TELL, DISAGREES, MAX_TRIALS, MIN_VALUES, judge, status
from bench.results.writer import RunDir

MS = 1e-3


@pytest.mark.parametrize(
    ("diff", "low", "high", "tol", "verdict"),
    [
        # issue 46's rows at 5 trials: beyond the tolerance, but the intervals hold 0
        (5.51, -22.7, 19.9, 5.29, CANNOT_TELL),
        (11.09, -8.1, 20.1, 5.00, CANNOT_TELL),
        # ... and a median inside with an interval as wide: no longer "ok"
        (4.73, -82.6, 6.7, 5.00, CANNOT_TELL),
        (1.07, -3.2, 4.1, 5.00, AGREES),
        (-0.5, -5.0, 5.0, 5.00, AGREES),  # touching both edges is still within
        (8.0, 6.0, 12.0, 5.00, DISAGREES),
        (-9.0, -12.0, -6.0, 5.00, DISAGREES),
        (7.0, 5.0, 9.0, 5.00, CANNOT_TELL),  # its low end is on the edge, not beyond it
        (0.3, 0.1, 0.9, 0.0, DISAGREES),  # no tolerance: an interval without 0 disagrees
    ],
)
def test_the_interval_decides(diff: float, low: float, high: float, tol: float, verdict: str) -> None:
    assert judge(diff * MS, low * MS, high * MS, tol * MS, n=5).verdict == verdict


def test_too_few_values_cannot_tell_however_the_interval_lies() -> None:
    inside, beyond = (0.0, -1.0, 1.0), (20.0, 15.0, 25.0)
    for diff, low, high in (inside, beyond):
        few = judge(diff, low, high, 5.0, n=MIN_VALUES - 1)
        assert few.verdict == CANNOT_TELL and few.trials == MIN_VALUES
        assert judge(diff, low, high, 5.0, n=MIN_VALUES).verdict != CANNOT_TELL
    none = judge(math.nan, math.nan, math.nan, 5.0, n=0)
    one = judge(2.0, 2.0, 2.0, 5.0, n=1)  # a point, not an interval: no spread seen
    for a in (none, one):
        assert a.verdict == CANNOT_TELL and a.trials is None
        assert a.note() == f"fewer than {MIN_VALUES} values a side"


def test_a_row_that_cannot_tell_says_how_many_trials_would() -> None:
    # half-width 10 around 0 against 5: the interval must halve, four times the trials
    centred = judge(0.0, -10.0, 10.0, 5.0, n=5)
    assert centred.trials == 20 and centred.note() == "~20 trials would tell"
    # beyond the edge by 3 with a reach of 6 below: also halve, to disagree
    assert judge(8.0, 2.0, 14.0, 5.0, n=5).trials == 20
    # the side that is already clear of its edge does not count
    assert judge(3.0, 2.5, 7.0, 5.0, n=10).trials == math.ceil(10 * (4 / 2) ** 2)
    # wider seen, more needed; a bigger gap to the edge, fewer
    assert judge(0.0, -20.0, 20.0, 5.0, n=5).trials == 80
    assert judge(0.0, -10.0, 10.0, 8.0, n=5).trials == math.ceil(5 * (10 / 8) ** 2)


def test_a_difference_on_the_edge_is_not_promised_a_verdict() -> None:
    for diff in (5.0, 5.01, 4.99):
        a = judge(diff, diff - 10.0, diff + 10.0, 5.0, n=5)
        assert a.verdict == CANNOT_TELL and a.trials is None and a.on_edge
        assert a.note() == f"on the tolerance's edge: not within {MAX_TRIALS} trials"


def test_the_exit_status_is_the_gates() -> None:
    assert status([AGREES, AGREES]) == 0
    assert status([AGREES, DISAGREES, CANNOT_TELL]) == 1
    assert status([AGREES, CANNOT_TELL]) == 2
    assert status([]) == 2, "nothing compared is not a pass"


def _values(
    case: str, bare: list[float], shift_first: float, shift_last: float
) -> dict[tuple[str, str, str], list[float]]:
    return {
        (case, "bare", "first"): bare,
        (case, "ftbench", "first"): [v + shift_first for v in bare],
        (case, "bare", "last"): bare,
        (case, "ftbench", "last"): [v + shift_last for v in bare],
    }


def _report(tmp_path: Path, values: dict[tuple[str, str, str], list[float]], *cases: str) -> CalibrationReport:
    comparisons = compare([BY_NAME[c] for c in cases], values, Tolerance())
    return CalibrationReport(rundir=RunDir(tmp_path), comparisons=comparisons, probes={})


def test_five_trials_beyond_the_tolerance_by_noise_exit_2_not_1(tmp_path: Path) -> None:
    """The issue's run in small: at 5 trials a side, the last survivor's median lands
    10 ms off (past the 5 ms tolerance) but the spread makes the interval hold 0."""
    noisy = [0.040, 0.045, 0.050, 0.055, 0.060]
    values = _values("kill-ddp", [0.025 + 0.0002 * i for i in range(5)], 0.0005, 0.0)
    values[("kill-ddp", "bare", "last")] = noisy
    values[("kill-ddp", "ftbench", "last")] = [v + 0.010 for v in noisy[::-1]]
    report = _report(tmp_path, values, "kill-ddp")
    first, last = report.comparisons
    assert first.agreement.verdict == AGREES
    assert abs(last.diff_s) > last.tolerance_s and last.ci.low < 0 < last.ci.high
    assert last.agreement.verdict == CANNOT_TELL and report.exit_status == 2
    lines = format_table(report, Tolerance()).splitlines()
    assert lines[-1] == "# Verdict : CANNOT TELL YET (exit 2): kill-ddp last"
    assert lines[-2] == "# rows: 1 agree, 0 disagree, 1 cannot tell"
    row = next(line for line in lines if line.startswith("kill-ddp") and " last " in line)
    assert row.endswith(f"cannot tell (~{last.agreement.trials} trials would tell)"), row
    assert MIN_VALUES < (last.agreement.trials or 0) <= MAX_TRIALS


def test_a_disagreement_outweighs_rows_that_cannot_tell(tmp_path: Path) -> None:
    bare = [0.020 + 0.0002 * i for i in range(15)]
    values = _values("kill-ddp", bare, 0.002, 0.030) | _values("kill-allreduce", bare[:3], 0.0, 0.0)
    report = _report(tmp_path, values, "kill-ddp", "kill-allreduce")
    verdicts = [c.agreement.verdict for c in report.comparisons]
    assert verdicts == [AGREES, DISAGREES, CANNOT_TELL, CANNOT_TELL]
    assert report.exit_status == 1
    text = format_table(report, Tolerance())
    assert text.splitlines()[-1] == "# Verdict : DISAGREES (exit 1): kill-ddp last"
    assert "DISAGREES" in text and "+30.00" in text


def test_a_side_without_the_figure_is_a_row_that_cannot_tell(tmp_path: Path) -> None:
    """Had the row been dropped, the case whose ftbench side never detected would have
    left the other case's agreement to pass the run."""
    bare = [0.020 + 0.001 * i for i in range(6)]
    values = _values("kill-ddp", bare, 0.0, 0.0) | {("kill-allreduce", "bare", "first"): bare}
    report = _report(tmp_path, values, "kill-ddp", "kill-allreduce")
    missing = report.comparisons[-1]
    assert (missing.case, missing.figure, missing.n) == ("kill-allreduce", "first", 0)
    assert missing.agreement.verdict == CANNOT_TELL and report.exit_status == 2
    (row,) = [line for line in format_table(report, Tolerance()).splitlines() if line.startswith("kill-allreduce")]
    assert row.split()[3:7] == ["22.50", "-", "-", "-"], row


def test_the_report_reads_new_runs_and_judges_old_ones_by_their_interval() -> None:
    new = {"verdict": "cannot tell", "verdict_note": "~20 trials would tell", "trials_to_decide": 20}
    old = {"ok": False}  # a run from before verdicts: its median past the tolerance
    numbers = {"bare_median_s": 0.05, "ftbench_median_s": 0.0555, "diff_s": 0.0055}
    numbers |= {"ci_low_s": -0.0227, "ci_high_s": 0.0199, "tolerance_s": 0.00529, "unit": "s"}
    rows = [
        {"case": "kill-ddp", "figure": "last", "n_bare": 5, "n_ftbench": 5} | numbers | extra for extra in (new, old)
    ]
    empty = {"case": "kill-allreduce", "figure": "first", "n_bare": 6, "n_ftbench": 0, "unit": "s"}
    empty |= dict.fromkeys(("ftbench_median_s", "diff_s", "ci_low_s", "ci_high_s"))
    empty |= {"bare_median_s": 0.02, "tolerance_s": 0.005, "verdict": "cannot tell", "verdict_note": ""}
    table = calibration({"comparisons": [*rows, empty]})
    assert list(table["verdict"]) == [
        "cannot tell (~20 trials would tell)",
        f"cannot tell ({judge(0.0055, -0.0227, 0.0199, 0.00529, 5).note()})",
        "cannot tell",
    ]
    assert table["ftbench"].iloc[2] == "-" and table["95 % CI of diff"].iloc[2] == "[-, -]"


def test_help_says_how_it_decides_and_exits() -> None:
    from click.testing import CliRunner

    from bench.cli import cli

    result = CliRunner().invoke(cli, ["calibrate", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "agrees when the whole interval lies within the tolerance" in text
    assert f"fewer than {MIN_VALUES} trials a side" in text
    assert "Exit 0 when all agree, 1 when any disagrees, 2 when none disagrees but some cannot tell" in text
