"""Pairing, the comparison marks, the gate's exit statuses, SLOs and JUnit XML, on
hand-made results directories; and the `compare`, `gate` and `baseline` commands."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.results import compare as cmp
from bench.results import gate as gt
from bench.results.reader import load, save_baseline
from bench.scenario.config import ConfigError
from bench.scenario.model import GateSpec, SLOSpec
from tests.unit.runfactory import trial, write_run

FAST = [0.010 + 0.001 * i for i in range(8)]  # 10-17 ms
SLOW = [0.050 + 0.001 * i for i in range(8)]  # 50-57 ms: 5x slower, every value above every FAST one


def opts(**kw) -> cmp.GateOptions:
    return cmp.GateOptions.from_spec(GateSpec(metric="ttd_s"), **kw)


def run(tmp_path: Path, ttds: list[float], salt: str = "", label: str = "demo", **kw) -> Path:
    return write_run(tmp_path, "demo", {label: [trial(t, 0.03) for t in ttds]}, salt=salt, **kw)


def test_regression_is_named_and_exits_1(tmp_path: Path) -> None:
    base, cand = load(run(tmp_path, FAST, "a")), load(run(tmp_path, SLOW, "b"))
    result = gt.gate(cand, opts(), base=base)
    (row,) = result.rows
    assert row.mark == "+" and row.verdict == "regression" and row.how == "label"
    assert (row.n_base, row.n_cand) == (8, 8)
    assert row.ratio == pytest.approx(0.0535 / 0.0135)
    assert row.p == pytest.approx(2 / 12870)  # exact: fully separated 8 vs 8 = 2 / C(16, 8)
    assert result.status == gt.REGRESSION
    assert "REGRESSION in demo [ttd_s]" in gt.verdict_line(result)


def test_improvement_and_same(tmp_path: Path) -> None:
    base, cand = load(run(tmp_path, SLOW, "a")), load(run(tmp_path, FAST, "b"))
    (row,) = gt.gate(cand, opts(), base=base).rows
    assert row.mark == "-" and row.verdict == "improvement"
    same = gt.gate(base, opts(), base=base)
    assert same.rows[0].mark == " " and same.rows[0].p == 1.0 and same.status == gt.PASS


def test_past_factor_but_not_significant_is_tilde(tmp_path: Path) -> None:
    # the medians differ by 17 % (past the factor and the floor) but the samples interleave
    base = [0.01, 0.05, 0.011, 0.06, 0.012, 0.07, 0.013, 0.08]
    cand = [0.02, 0.051, 0.021, 0.061, 0.022, 0.071, 0.023, 0.081]
    r = gt.gate(load(run(tmp_path, cand, "b")), opts(floor_s=0.001), base=load(run(tmp_path, base, "a"))).rows[0]
    assert r.ratio > 1.1 and r.cand_median - r.base_median > 0.001
    assert r.mark == "~" and r.verdict == "not significant" and r.p > 0.05


def test_floor_hides_tiny_differences(tmp_path: Path) -> None:
    base, cand = load(run(tmp_path, FAST, "a")), load(run(tmp_path, [v + 0.005 for v in FAST], "b"))
    assert gt.gate(cand, opts(floor_s=0.01), base=base).rows[0].mark == " "
    assert gt.gate(cand, opts(floor_s=0.001, factor=1.1), base=base).rows[0].mark == "+"


def test_insufficient_trials_is_exit_2_not_a_pass(tmp_path: Path) -> None:
    base, cand = load(run(tmp_path, FAST[:5], "a")), load(run(tmp_path, SLOW[:5], "b"))
    result = gt.gate(cand, opts(), base=base)
    assert result.rows[0].mark == "?" and result.status == gt.INSUFFICIENT
    assert "INSUFFICIENT" in gt.verdict_line(result)
    # the threshold is the option's
    assert gt.gate(cand, opts(min_trials=5), base=base).status == gt.REGRESSION


def test_new_failure_is_a_regression_on_its_own(tmp_path: Path) -> None:
    base = write_run(tmp_path, "demo", {"demo": [trial(0.01, 0.03)] * 3}, salt="a")
    cand = write_run(tmp_path, "demo", {"demo": [trial(0.01, 0.03)] * 2 + [trial(0.01, None, "hung")]}, salt="b")
    result = gt.gate(load(cand), opts(), base=load(base))
    assert result.rows[0].mark == "!" and "hung 1" in result.rows[0].note
    assert result.status == gt.REGRESSION
    # an outcome the baseline also had is not new (fail-stop fails every time)
    fs = write_run(tmp_path, "fs", {"demo": [trial(0.01, None)] * 7}, salt="c")
    assert gt.gate(load(fs), opts(), base=load(fs)).rows[0].mark != "!"


def test_pairing_by_hash_label_and_leftover(tmp_path: Path) -> None:
    pts = {"strategy=failstop": [trial(0.01)] * 7, "strategy=reinit": [trial(0.01, 0.03)] * 7}
    a = load(write_run(tmp_path, "sweep", pts, salt=""))
    b = load(write_run(tmp_path / "b", "sweep", pts, salt=""))
    assert [p.how for p in cmp.pair_points(a, b)] == ["hash", "hash"]
    c = load(write_run(tmp_path / "c", "sweep", pts, salt="knob"))
    assert [p.how for p in cmp.pair_points(a, c)] == ["label", "label"]
    one = load(write_run(tmp_path / "d", "x", {"x": [trial(0.01)] * 7}, salt="1"))
    other = load(write_run(tmp_path / "e", "y", {"y": [trial(0.02)] * 7}, salt="2"))
    (pair,) = cmp.pair_points(one, other)
    assert pair.how == "only" and pair.label == "x / y"
    extra = cmp.pair_points(a, one)
    assert {p.how for p in extra} == {"-"} and len(extra) == 3


def test_unpaired_and_absent_figures(tmp_path: Path) -> None:
    pts = {"strategy=failstop": [trial(0.01)] * 7, "strategy=reinit": [trial(0.01, 0.03)] * 7}
    base = load(write_run(tmp_path, "s", pts))
    cand = load(write_run(tmp_path / "c", "s", {"strategy=reinit": pts["strategy=reinit"]}))
    rows = cmp.compare_runs(base, cand, opts(metrics=("ttr_s",)))
    marks = {r.label: r.mark for r in rows}
    assert marks == {"strategy=failstop": "?", "strategy=reinit": " "}  # a lost point is missing data
    rows = cmp.compare_runs(base, base, opts(metrics=("ttr_s",)))
    assert {r.label: r.mark for r in rows}["strategy=failstop"] == "x"  # fail-stop never recovers
    # the baseline recovered once in 7, the candidate never: no new outcome, but no pass either
    mostly = load(write_run(tmp_path / "m", "m", {"m": [trial(0.01)] * 6 + [trial(0.01, 0.03)]}))
    never = load(write_run(tmp_path / "n", "m", {"m": [trial(0.01)] * 7}))
    (row,) = cmp.compare_runs(mostly, never, opts(metrics=("ttr_s",)))
    assert row.mark == "?" and "failed 7" in row.note
    (row,) = cmp.compare_runs(never, mostly, opts(metrics=("ttr_s",)))
    assert row.mark == "x"


def test_run_differences_name_the_knob(tmp_path: Path) -> None:
    a = load(run(tmp_path, FAST, "a", config={"workload": {"pg_timeout_s": 2.0}}))
    b = load(run(tmp_path, FAST, "b", config={"workload": {"pg_timeout_s": 3.0}}, versions={"torch": "2.14.0"}))
    lines = cmp.run_differences(a, b)
    assert any("workload.pg_timeout_s: 2.0 -> 3.0" in line for line in lines)
    assert any("versions torch" in line and "2.14.0" in line for line in lines)


def test_slo_checks_every_trial(tmp_path: Path) -> None:
    path = write_run(tmp_path, "ci", {"ci": [trial(5.02, 0.53), trial(5.03, 0.52), trial(5.01, 0.55)]})
    r = load(path)
    ok = gt.check_slos(r, [SLOSpec(metric="ttd_s", stat="max", max=5.5), SLOSpec(metric="ttd_s", stat="min", min=4.9)])
    assert [s.ok for s in ok] == [True, True] and ok[0].value == 5.03 and ok[0].n == 3
    bad = gt.check_slos(r, [SLOSpec(metric="ttr_s", stat="p95", max=0.54)])
    assert not bad[0].ok
    missing_point = gt.check_slos(r, [SLOSpec(metric="ttd_s", max=9, point="nope")])
    assert not missing_point[0].ok and "nope" in missing_point[0].note
    # a trial without the figure misses the service level (nobody detected the stall)
    holes = load(write_run(tmp_path / "h", "ci", {"ci": [trial(5.02, 0.5), trial(None, None, "hung")]}))
    (row,) = gt.check_slos(holes, [SLOSpec(metric="ttd_s", stat="max", max=5.5)])
    assert not row.ok and "1 of 2 trials have no ttd_s" in row.note and "hung 1" in row.note


def test_options_come_from_the_scenario_and_are_checked() -> None:
    spec = GateSpec(metric="ttr_s", factor=1.5, floor_s=0.2, alpha=0.01, min_trials=9)
    o = cmp.GateOptions.from_spec(spec)
    assert (o.metrics, o.factor, o.floor_s, o.alpha, o.min_trials) == (("ttr_s",), 1.5, 0.2, 0.01, 9)
    assert cmp.GateOptions.from_spec(spec, factor=1.2, metrics=("ttd_s",)).factor == 1.2
    for bad in ({"factor": 0.9}, {"alpha": 1.0}, {"floor_s": -1.0}, {"min_trials": 1}, {"metrics": ("nope",)}):
        with pytest.raises(ConfigError):
            cmp.GateOptions.from_spec(spec, **bad)


def test_junit_xml(tmp_path: Path) -> None:
    base, cand = load(run(tmp_path, FAST, "a")), load(run(tmp_path, SLOW, "b"))
    result = gt.gate(
        cand,
        opts(),
        base=base,
        slos=[SLOSpec(metric="ttd_s", stat="max", max=1.0), SLOSpec(metric="ttd_s", stat="min", min=1.0)],
    )
    root = ET.fromstring(gt.junit_xml(result))
    assert root.attrib["tests"] == "3" and root.attrib["failures"] == "2"
    cases = root.findall(".//testcase")
    assert cases[0].find("failure").attrib["type"] == "regression"
    assert cases[1].find("failure") is None and cases[2].find("failure") is not None


def test_cli_gate_demo_and_self(tmp_path: Path) -> None:
    base, cand = run(tmp_path, FAST, "a"), run(tmp_path, SLOW, "b")
    junit = tmp_path / "out" / "junit.xml"
    r = CliRunner().invoke(
        cli, ["gate", str(cand), "--baseline", str(base), "--metric", "ttd_s", "--junit", str(junit)]
    )
    assert r.exit_code == 1, r.output
    assert "+" in r.output and "REGRESSION in demo [ttd_s]" in r.output
    assert ET.parse(junit).getroot().attrib["failures"] == "1"
    same = CliRunner().invoke(cli, ["gate", str(cand), "--baseline", str(cand), "--metric", "ttd_s"])
    assert same.exit_code == 0 and "gate: pass" in same.output
    few = run(tmp_path / "few", FAST[:3], "c")
    assert CliRunner().invoke(cli, ["gate", str(few), "--baseline", str(few)]).exit_code == 2


def test_cli_gate_slo_from_scenario_table(tmp_path: Path) -> None:
    gate = {"metric": "ttd_s", "slo": [{"metric": "ttd_s", "stat": "max", "max": 0.02}]}
    good = write_run(tmp_path, "ci", {"ci": [trial(t, 0.03) for t in FAST[:3]]}, gate=gate, salt="g")
    r = CliRunner().invoke(cli, ["gate", str(good)])
    assert r.exit_code == 0, r.output and "ok" in r.output
    slow = write_run(tmp_path, "ci", {"ci": [trial(t, 0.03) for t in SLOW[:3]]}, gate=gate, salt="s")
    r = CliRunner().invoke(cli, ["gate", str(slow)])
    assert r.exit_code == 1 and "max(ttd_s) <= 0.02" in r.output
    assert CliRunner().invoke(cli, ["gate", str(slow), "--no-slo"]).exit_code == 2  # nothing to gate


def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["gate", str(tmp_path / "missing")])
    assert r.exit_code == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "missing" in lines[0] and "run.json" in lines[0]
    good = run(tmp_path, FAST, "a")
    r = CliRunner().invoke(cli, ["compare", str(good), str(good), "--factor", "0.5"])
    assert r.exit_code == 2 and "--factor" in r.stderr
    bad_gate = write_run(tmp_path / "bg", "x", {"x": [trial(0.01)]}, gate={"factor": "big"})
    r = CliRunner().invoke(cli, ["gate", str(bad_gate), "--baseline", str(bad_gate)])
    assert r.exit_code == 2 and "gate.factor" in r.stderr


def test_cli_compare_prints_every_figure(tmp_path: Path) -> None:
    base, cand = run(tmp_path, FAST, "a"), run(tmp_path, SLOW, "b")
    r = CliRunner().invoke(cli, ["compare", str(base), str(cand)])
    assert r.exit_code == 0, r.output
    for fig in ("[ttd_s]", "[ttr_s]", "[downtime_s]", "[phase_detect_s]"):
        assert fig in r.output
    assert "[loss_delta]" not in r.output  # no run has it


def test_baselines_are_saved_and_found_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = run(tmp_path, FAST, "a", steps=True)
    monkeypatch.chdir(tmp_path)
    dest = save_baseline(load(src))
    assert dest == Path("results/baselines/demo")
    assert sorted(p.name for p in dest.iterdir()) == ["run.json", "trials.csv", "trials.jsonl"]
    assert load("demo").values(load(src).points()[0]["point_hash"], "ttd_s") == pytest.approx(FAST)
    r = CliRunner().invoke(cli, ["baseline", str(src), "--name", "other"])
    assert r.exit_code == 0 and (tmp_path / "results/baselines/other/run.json").exists()
    # a scenario directory resolves to its newest run
    assert load(tmp_path / "demo").path == src
