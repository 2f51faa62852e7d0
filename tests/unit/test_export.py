"""Exports read by other tools: pytest-benchmark (checked with its own code and its
``compare`` command), github-action-benchmark and Bencher BMF."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.results import export
from bench.results.reader import load
from bench.results.stats import median
from tests.child_pytest import child_pytest
from tests.unit.runfactory import trial, write_run

TTD = [0.010, 0.012, 0.011, 0.015, 0.013, 0.030, 0.014]
TTR = [0.040, 0.041, 0.045, 0.043, 0.042, 0.044, 0.090]


def sweep_run(tmp_path: Path, salt: str = "") -> Path:
    return write_run(
        tmp_path,
        "kill",
        {
            "strategy=failstop": [trial(t) for t in TTD],
            "strategy=reinit": [trial(t, r) for t, r in zip(TTD, TTR, strict=True)],
        },
        salt=salt,
    )


@pytest.mark.parametrize(
    "data",
    [
        [1.0],
        [3.0, 1.0],
        [1.0, 2.0, 3.0, 10.0, 4.0],
        [0.5, 0.1, 0.3, 0.9, 0.2, 0.25, 4.0],
        list(map(float, range(1, 12))),
    ],
)
def test_stats_equal_pytest_benchmarks_own(data: list[float]) -> None:
    stats_mod = pytest.importorskip("pytest_benchmark.stats")
    theirs = stats_mod.Stats()
    for v in data:
        theirs.update(v)
    ours = export.pytest_benchmark_stats(data)
    for field in stats_mod.Stats.fields:
        assert ours[field] == pytest.approx(getattr(theirs, field)), field
    assert ours["data"] == data and ours["iterations"] == 1


def test_pytest_benchmark_layout(tmp_path: Path) -> None:
    doc = export.pytest_benchmark(load(sweep_run(tmp_path)))
    names = [b["name"] for b in doc["benchmarks"]]
    assert "ttd_s[strategy=failstop]" in names and "ttr_s[strategy=reinit]" in names
    assert "ttr_s[strategy=failstop]" not in names  # fail-stop never recovers: no benchmark, not a 0
    assert not any(b["group"] in ("goodput", "steps_lost") for b in doc["benchmarks"])  # not seconds
    ttr = next(b for b in doc["benchmarks"] if b["name"] == "ttr_s[strategy=reinit]")
    assert ttr["stats"]["rounds"] == 7 and ttr["stats"]["median"] == pytest.approx(median(TTR))
    assert ttr["extra_info"]["outcomes"] == {"recovered": 7}
    assert doc["commit_info"]["id"] == "abc" and doc["datetime"].endswith("+00:00")


def test_pytest_benchmark_compare_reads_the_export(tmp_path: Path) -> None:
    pytest.importorskip("pytest_benchmark")
    a = tmp_path / "0001_base.json"
    b = tmp_path / "0002_cand.json"
    export.write(load(sweep_run(tmp_path / "a")), "pytest-benchmark", a)
    export.write(load(sweep_run(tmp_path / "b", salt="x")), "pytest-benchmark", b)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_benchmark",
            "compare",
            str(a),
            str(b),
            "--group-by",
            "name",
            "--columns",
            "min,median,max,rounds",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    rows = [line for line in out.splitlines() if line.startswith("ttr_s[strategy=reinit] (")]
    assert len(rows) == 2 and "0001_base)" in rows[0] and "0002_cand)" in rows[1]
    assert rows[0].split()[-1] == "7"  # rounds = trials
    assert "benchmark 'ttd_s[strategy=failstop]': 2 tests" in out


def test_github_action_benchmark(tmp_path: Path) -> None:
    r = load(sweep_run(tmp_path))
    smaller = export.github_action_benchmark(r)
    by_name = {e["name"]: e for e in smaller}
    e = by_name["kill/strategy=reinit ttr_s"]
    assert e["unit"] == "s" and e["value"] == pytest.approx(median(TTR))
    assert "n=7" in e["extra"] and "CI of the median" in e["range"]
    assert "kill/strategy=failstop ttr_s" not in by_name
    assert not any("goodput" in n or "loss_delta" in n for n in by_name)
    bigger = export.github_action_benchmark(r, bigger=True)
    assert {e["name"] for e in bigger} == {"kill/strategy=failstop goodput", "kill/strategy=reinit goodput"}
    assert all(e["unit"] == "ratio" for e in bigger)


def test_bencher_bmf(tmp_path: Path) -> None:
    bmf = export.bencher_bmf(load(sweep_run(tmp_path)))
    assert set(bmf) == {"kill/strategy=failstop", "kill/strategy=reinit"}
    m = bmf["kill/strategy=reinit"]["ttd_s"]
    assert m["value"] == pytest.approx(median(TTD))
    assert m["lower_value"] <= m["value"] <= m["upper_value"]  # 7 trials: a 95 % CI exists
    assert "ttr_s" not in bmf["kill/strategy=failstop"]
    few = export.bencher_bmf(load(write_run(tmp_path / "few", "k", {"k": [trial(0.01, 0.02)] * 3})))
    assert set(few["k"]["ttd_s"]) == {"value"}  # too few trials for an interval: none claimed


def test_cli_export(tmp_path: Path) -> None:
    src = sweep_run(tmp_path)
    out = tmp_path / "x" / "bmf.json"
    r = CliRunner().invoke(cli, ["export", str(src), "--format", "bencher", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "kill/strategy=reinit" in json.loads(out.read_text())
    r = CliRunner().invoke(cli, ["export", str(src), "--format", "github-smaller"])
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["unit"] == "s"
    r = CliRunner().invoke(cli, ["export", str(src), "--format", "csv"])
    assert r.exit_code == 2 and "--format" in r.stderr


PLUGIN_TEST = """
def test_recorded(ftbench_scenario):
    result = ftbench_scenario.record({run!r}, metric="ttr_s", point="strategy=reinit")
    assert result.outcomes() == {{"recovered": 7}}
    assert len(result.values()) == 7


def test_needs_a_point(ftbench_scenario):
    try:
        ftbench_scenario.record({run!r})
    except ValueError as err:
        assert "strategy=failstop, strategy=reinit" in str(err)
    else:
        raise AssertionError("several points and no point= must be refused")
"""


def test_pytest_plugin_stores_figures_in_pytest_benchmark(tmp_path: Path) -> None:
    pytest.importorskip("pytest_benchmark")
    run = sweep_run(tmp_path / "runs")
    (tmp_path / "test_user.py").write_text(PLUGIN_TEST.format(run=str(run)))
    out = tmp_path / "bench.json"
    proc = child_pytest(tmp_path, "test_user.py", f"--benchmark-json={out}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (b,) = [b for b in json.loads(out.read_text())["benchmarks"] if b["name"] == "test_recorded"]
    assert b["stats"]["rounds"] == 7 and b["stats"]["median"] == pytest.approx(median(TTR))
    assert b["extra_info"]["metric"] == "ttr_s" and b["extra_info"]["point"] == "strategy=reinit"
    assert b["extra_info"]["median_ttd_s"] == pytest.approx(median(TTD))
    # disabled benchmarks: the figures are still returned, nothing is stored
    out2 = tmp_path / "off.json"
    proc = child_pytest(tmp_path, "test_user.py", "--benchmark-disable", f"--benchmark-json={out2}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not out2.exists() or not json.loads(out2.read_text())["benchmarks"]
