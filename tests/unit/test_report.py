"""``ftbench report`` on hand-made runs: the files, the figures the Markdown shows, a
self-contained HTML page, honest tables, and the helpers that place phases in time."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.report import make_report
from bench.report.series import build_series, representative_trial, run_tags, trial_marks
from bench.report.tables import summary
from bench.results.reader import load, save_baseline
from tests.unit.runfactory import trial, write_run

PNG = b"\x89PNG\r\n\x1a\n"
TTD = [0.010, 0.012, 0.011, 0.015, 0.013, 0.030]
TTR = [0.040, 0.041, 0.045, 0.043, 0.042, 0.044]


def sweep(tmp_path: Path, **kw) -> Path:
    return write_run(
        tmp_path,
        "kill",
        {
            "strategy=failstop": [trial(t) for t in TTD],
            "strategy=reinit": [trial(t, r) for t, r in zip(TTD, TTR, strict=True)],
        },
        steps=True,
        **kw,
    )


def test_report_files_and_figures(tmp_path: Path) -> None:
    run = sweep(tmp_path, reference=True)
    files = make_report([run])
    assert files.markdown == run / "report.md" and files.html == run / "report.html"
    names = sorted(p.name for p in files.images)
    assert names == [
        "box.png",
        "ecdf.png",
        "loss.png",
        "phases.png",
        "timeline_00_strategy_failstop.png",
        "timeline_01_strategy_reinit.png",
    ]
    for p in files.images:
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 10_000
    md = files.markdown.read_text()
    linked = re.findall(r"!\[[^\]]*\]\((plots/[^)]+\.png)\)", md)
    assert sorted(Path(p).name for p in linked) == names
    for section in (
        "## Summary",
        "## Distributions",
        "## Phases of recovery",
        "## Step-time timelines",
        "## Loss against the fault-free reference",
        "## Environment",
    ):
        assert section in md
    assert "torch" in md and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in md  # versions and knobs
    # the HTML page is self-contained: every figure embedded, nothing linked
    page = files.html.read_text()
    sources = re.findall(r'src="([^"]+)"', page)
    assert len(sources) == len(files.images) and all(s.startswith("data:image/png;base64,") for s in sources)
    assert "<table" in page and "href=" not in page


def test_summary_is_honest_about_missing_figures_and_n(tmp_path: Path) -> None:
    df = summary(build_series([load(sweep(tmp_path))]))
    failstop = df[df["point"] == "strategy=failstop"].iloc[0]
    reinit = df[df["point"] == "strategy=reinit"].iloc[0]
    assert failstop["ttr_s"] == "-" and failstop["outcomes"] == "failed 6"
    # median, the 95 % CI of the median (n=6: [min, max]) and n
    assert reinit["ttr_s"] == "42.5 ms [40 ms, 45 ms] (n=6)"
    assert reinit["ttd_s"].endswith("(n=6)")


def test_trial_marks_lay_phases_end_to_end(tmp_path: Path) -> None:
    series = build_series([load(sweep(tmp_path))])
    reinit = next(s for s in series if s.strategy == "reinit")
    trial_no, why = representative_trial(reinit)
    assert trial_no in range(6) and "median" in why
    marks = trial_marks(reinit, 0)
    assert marks is not None and marks.injections[0][0] == pytest.approx(0.5) and marks.inject_steps == [10]
    spans = [(s.column, s.start, s.end) for s in marks.spans]
    assert [c for c, *_ in spans] == ["phase_detect_s", "phase_isolate_s", "phase_reconfigure_s", "phase_catchup_s"]
    assert spans[0][1] == pytest.approx(0.5) and spans[0][2] == pytest.approx(0.5 + TTD[0])
    assert spans[-1][2] == pytest.approx(0.5 + TTD[0] + TTR[0])  # the phases add up to the downtime
    for (_, _, end), (_, start, _) in itertools.pairwise(spans):
        assert start == pytest.approx(end)


def test_report_on_a_baseline_without_logs_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    base = save_baseline(load(sweep(tmp_path)), "b")
    files = make_report([base], tmp_path / "rep")
    md = files.markdown.read_text()
    assert "no steps.csv or event log" in md and "no loss values" in md
    assert {p.name for p in files.images} == {"ecdf.png", "box.png", "phases.png"}


def test_several_runs_are_told_apart(tmp_path: Path) -> None:
    a = load(
        write_run(tmp_path, "s", {"s": [trial(2.0, 0.5)] * 3}, salt="a", config={"workload": {"pg_timeout_s": 2.0}})
    )
    b = load(
        write_run(tmp_path, "s", {"s": [trial(3.0, 0.5)] * 3}, salt="b", config={"workload": {"pg_timeout_s": 3.0}})
    )
    assert run_tags([a, b]) == ["pg_timeout_s=2.0", "pg_timeout_s=3.0"]
    names = [s.name for s in build_series([a, b])]
    assert names == ["pg_timeout_s=2.0: s", "pg_timeout_s=3.0: s"]
    r = CliRunner().invoke(cli, ["report", str(a.path), str(b.path)])
    assert r.exit_code == 2 and "--out" in r.stderr  # several runs need a place of their own
    r = CliRunner().invoke(cli, ["report", str(a.path), str(b.path), "--out", str(tmp_path / "both")])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "both" / "report.md").read_text()
    assert "pg_timeout_s=2.0" in md and "pg_timeout_s=3.0" in md


def test_cli_report_bad_dir(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert r.exit_code == 2 and "run.json" in r.stderr


def test_every_phase_has_a_colour_of_its_own() -> None:
    # Two phases sharing a colour (abort and import once did) make a stacked bar unreadable.
    from bench.report.series import phase_colour
    from bench.scenario.figures import phase_column
    from bench.scenario.loader import known_phases

    colours = [phase_colour(phase_column(p)) for p in known_phases()]
    assert len(set(colours)) == len(colours)
