"""``ftbench scale`` without processes: its keys checked, growth models chosen and
crossed, a run directory read back, the page drawn without warnings, and ``ftbench
project`` scaling control-plane phases by a scale run's curve (made-up runs)."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.project import assumptions, build
from bench.results.reader import load as load_run
from bench.scale import anchors, growth, page, rundir, spec
from bench.scale.coordinators import COORDINATORS, STANDS_FOR
from bench.scale.curves import curve, fits_table
from bench.scale.records import Record, Stop
from bench.scenario.config import ConfigError
from tests.unit.runfactory import trial, write_run

SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)


def scale_run(root: Path, shapes: dict[tuple[str, str], object], stops: tuple[Stop, ...] = ()) -> Path:
    """A scale run under ``root/scale`` whose (coordinator, op) latencies follow ``shapes``
    (seconds as a function of N), two repetitions per size, p50 below p95 below all."""
    path = root / "scale" / "20261207T000000Z_test"
    path.mkdir(parents=True)
    info = {
        "created": "2026-12-07T00:00:00+00:00",
        "spec": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec.ScaleSpec(sizes=SIZES)).items()},
        "stops": [asdict(s) for s in stops],
        "skipped": {},
        "machine": {"cpus": 2, "memory_bytes": 24e9},
        "finished": True,
    }
    (path / rundir.INFO).write_text(json.dumps(info))
    for (coordinator, op), shape in shapes.items():
        for n in SIZES:
            for rep in range(2):
                v = float(shape(n)) * (1.0 + 0.02 * rep)  # type: ignore[operator]
                rec = Record(coordinator, op, n, rep, n, done=n, p50_s=0.6 * v, p95_s=0.9 * v, all_s=v)
                rec.server_cpu_s, rec.sent_bytes, rec.client_cpu_s = 0.1, 1e6, 0.2
                rundir.append(path, rec)
    return path


# --- keys -------------------------------------------------------------------------------


def test_every_key_is_checked_and_named() -> None:
    assert spec.build(("sizes=[64, 8, 8]", "coordinators=['nvrx']")).sizes == (8, 64)
    assert spec.build((), full=True).sizes[-1] == 16_384
    for bad in ("sizes=[1]", "sizes='many'", "coordinators=['etcd']", "repeats=0", "deadline_s=0", "nope=1"):
        with pytest.raises(ConfigError) as err:
            spec.build((bad,))
        assert bad.split("=")[0] in str(err.value)
    res = CliRunner().invoke(cli, ["scale", "--set", "sizes=[0]"])
    assert res.exit_code == 2 and "sizes" in res.output and "Traceback" not in res.output


def test_each_curve_that_stands_for_a_phase_is_an_operation_measured() -> None:
    from bench.scenario.strategy import STRATEGIES

    for (coordinator, op), targets in STANDS_FOR.items():
        assert COORDINATORS[coordinator].op(op).name == op and targets
        for strategy, phase, fallback in targets:
            phases = {p for p, _ in STRATEGIES[strategy].phases}
            assert phase in phases and (not fallback or fallback in phases), (strategy, phase, fallback)


def test_list_shows_the_coordinators() -> None:
    res = CliRunner().invoke(cli, ["list"])
    assert res.exit_code == 0
    assert all(name in res.output for name in COORDINATORS)


# --- growth models ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        (lambda n: 0.01 + 0 * n, "constant"),
        (lambda n: 0.01 + 0.002 * np.log2(n), "log"),
        (lambda n: 0.01 + 1e-4 * n, "linear"),
        (lambda n: 0.01 + 1e-6 * n * np.log2(n), "nlogn"),
        (lambda n: 0.01 + 1e-7 * n**2, "quadratic"),
    ],
)
def test_the_shape_of_the_data_is_the_model_chosen(shape: object, expected: str) -> None:
    n = np.repeat(np.array(SIZES, dtype=float), 3)
    rng = np.random.default_rng(1)
    y = shape(n) * (1 + 0.01 * rng.standard_normal(len(n)))  # type: ignore[operator]
    assert growth.choose(n.tolist(), y.tolist(), relative=True).fit.model == expected


def test_crossings_are_where_the_curve_reaches_the_threshold() -> None:
    fit = growth.fit_model("linear", [8, 16, 32], [0.008, 0.016, 0.032])  # 1 ms a participant
    assert growth.crossing(fit, 1.0) == pytest.approx(1000, rel=1e-3)
    assert growth.crossing(growth.fit_model("constant", [8, 16], [0.1, 0.1]), 1.0) is None
    assert growth.crossing(growth.fit_model("constant", [8, 16], [2.0, 2.0]), 1.0) == 1.0


def test_project_keeps_its_three_models_for_a_few_ranks() -> None:
    from bench.project.fit import MODELS, choose

    w = [2, 2, 4, 4, 8, 8]
    assert MODELS == ("constant", "log", "linear")
    assert {f.model for f in choose(w, [x**2 for x in w]).candidates} == set(MODELS)


# --- a run directory and its page --------------------------------------------------------


def test_a_run_reads_back_and_draws_without_warnings(tmp_path: Path) -> None:
    path = scale_run(
        tmp_path,
        {("tcpstore-libuv", "connect"): lambda n: 1e-4 * n, ("membership", "agree"): lambda n: 1e-6 * n**2},
        (Stop("membership", 2048, "time budget", "agree: no result within 20 s", op="agree"),),
    )
    run = rundir.load(tmp_path / "scale")  # the newest run of the directory
    assert run.path == path and len(run.records) == 2 * 2 * len(SIZES)
    c = curve(run, "membership", "agree")
    assert c is not None and c.choice.fit.model == "quadratic" and c.max_n == 1024
    assert c.crossings[1.0] == pytest.approx(1000, rel=0.05)
    table = fits_table([c])
    assert "measured range" in table.iloc[0]["N at 1 s"] and "extrapolated" in table.iloc[0]["N at 60 s"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        md, png = page.write(run)
    text = md.read_text()
    assert "membership / agree: stopped at N = 2,048 (time budget)" in text
    assert png.stat().st_size > 0
    row = anchors.table(run).set_index("coordinator / op").loc["tcpstore-libuv / connect"]
    assert row["how"].startswith("extrapolated") and row["ftbench (this run)"] == "9.93 s"  # 1.01e-4 x 98,304


def test_an_empty_figure_stays_empty(tmp_path: Path) -> None:
    path = scale_run(tmp_path, {("nvrx", "barrier"): lambda n: 1e-3 * n})
    rundir.append(path, Record("nvrx", "barrier", 2048, 0, 2048, done=1000, error="no result within 20 s"))
    rows = (path / rundir.POINTS).read_text().splitlines()
    assert rows[-1].split(",")[rundir.COLUMNS.index("all_s")] == ""
    run = rundir.load(path)
    assert curve(run, "nvrx", "barrier").max_n == 1024  # type: ignore[union-attr]
    assert math.isnan(float(run.records.iloc[-1]["all_s"]))


def test_the_newest_finished_run_is_the_default(tmp_path: Path) -> None:
    done = scale_run(tmp_path, {("nvrx", "barrier"): lambda n: 1e-3 * n})
    cut = tmp_path / "scale" / "20261208T000000Z_later"
    cut.mkdir()
    (cut / rundir.INFO).write_text(json.dumps({"created": "2026-12-08T00:00:00+00:00", "finished": False}))
    assert rundir.resolve(tmp_path / "scale") == done
    assert rundir.resolve(cut) == cut  # named, it is taken as it is


def test_the_projection_takes_the_newest_run_of_every_coordinator(tmp_path: Path) -> None:
    """A later sweep of one coordinator does not take the others' curves away."""
    every = scale_run(tmp_path, {("nvrx", "barrier"): lambda n: 1e-3 * n})
    info = json.loads((every / rundir.INFO).read_text())

    def later(name: str, created: str, coordinators: list[str]) -> Path:
        path = tmp_path / "scale" / name
        path.mkdir()
        (path / rundir.INFO).write_text(
            json.dumps({**info, "created": created, "spec": {**info["spec"], "coordinators": coordinators}})
        )
        return path

    later("20261208T000000Z_one", "2026-12-08T00:00:00+00:00", ["membership"])
    assert rundir.widest(tmp_path / "scale") == every
    again = later("20261209T000000Z_all", "2026-12-09T00:00:00+00:00", info["spec"]["coordinators"])
    assert rundir.widest(tmp_path / "scale") == again


def test_a_directory_without_a_run_is_a_one_line_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["scale", "--show", str(tmp_path)])
    assert res.exit_code == 2 and "scale.json" in res.output and "Traceback" not in res.output


# --- into the projection ------------------------------------------------------------------

ROUND = ("gpus=[800]", "gpus_per_host=8", "failures_per_host_day=0.864")
"""lambda = 1e-3 per second at 800 GPUs (tests/unit/test_project.py)."""


def _full(ttd: float, ttr: float) -> dict[str, object]:
    return trial(ttd, ttr, ttfs_s=ttd + ttr)


def test_control_plane_phases_take_the_curve_at_the_clusters_participants(tmp_path: Path) -> None:
    # reinit's isolate phase stands for membership/agree: 1 ms a rank. Measured at 4 ranks,
    # projected to 800: + (800 - 4) ms. L = 1 + 9 = 10 s before, 10.796 s with the curve.
    run = write_run(tmp_path, "s", {"strategy=reinit": [_full(1.0, 9.0)] * 3})
    scale_run(tmp_path, {("membership", "agree"): lambda n: 1e-3 * n})
    cluster = assumptions.cluster(None, ROUND)
    before = build(load_run(run), cluster, replicates=20).projections[0].cells[0].effective
    res = build(load_run(run), cluster, control=rundir.load(tmp_path / "scale"), replicates=20)
    after = res.projections[0].cells[0].effective
    assert before == pytest.approx(1 / 1.01)
    assert after == pytest.approx(1 / (1 + 1e-3 * 10.796), rel=1e-3)
    assert [(u.strategy, u.phase) for u in res.control_used] == [("reinit", "isolate")]
    assert "membership/agree" in res.projections[0].models["isolate"]


def test_the_cli_finds_the_newest_scale_run_and_says_what_it_took(tmp_path: Path) -> None:
    run = write_run(tmp_path, "s", {"strategy=reinit": [_full(1.0, 9.0)] * 3})
    scale_run(tmp_path, {("membership", "agree"): lambda n: 1e-3 * n})
    res = CliRunner().invoke(cli, ["project", str(run), "--out", str(tmp_path / "p"), "--set", "gpus=[800, 100000]"])
    assert res.exit_code == 0, res.output
    assert "isolate ← membership/agree" in res.output
    assert "extrapolated past 1,024" in res.output  # 100,000 ranks, measured to 1,024
    none = CliRunner().invoke(cli, ["project", str(run), "--out", str(tmp_path / "q"), "--scale", "none"])
    assert "no scale run (--scale)" in none.output
    bad = CliRunner().invoke(cli, ["project", str(run), "--scale", str(tmp_path / "nowhere")])
    assert bad.exit_code == 2 and "--scale" in bad.output


def test_hosts_count_the_agents_of_a_launcher() -> None:
    from bench.project.control import counter

    cluster = assumptions.cluster(None, ("gpus_per_host=8",))
    assert counter("host", cluster)(100_000) == 12_500 and counter("rank", cluster)(100_000) == 100_000
    assert counter("replica group", cluster)(4) == 1


def test_a_curve_whose_phase_the_run_lacks_adds_to_the_phase_that_holds_its_time(tmp_path: Path) -> None:
    # reinit without a peer restore has no restore phase: the resume step's growth (1 ms
    # a rank) goes into reconfigure, on top of reconfigure's own.
    run = write_run(tmp_path, "s", {"strategy=reinit": [_full(1.0, 9.0)] * 3})
    scale_run(tmp_path, {("membership", "resume"): lambda n: 1e-3 * n})
    cluster = assumptions.cluster(None, ROUND)
    res = build(load_run(run), cluster, control=rundir.load(tmp_path / "scale"), replicates=20)
    p = res.projections[0]
    assert "restore" not in p.point.phases
    assert p.cells[0].effective == pytest.approx(1 / (1 + 1e-3 * 10.796), rel=1e-3)
    assert "plus control plane membership/resume" in p.models["reconfigure"]
    assert [(u.strategy, u.phase) for u in res.control_used] == [("reinit", "restore")]
