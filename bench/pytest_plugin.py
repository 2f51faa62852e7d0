"""pytest plugin: run an ftbench scenario from a project's own test suite and keep its
figures in pytest-benchmark's storage, next to the project's micro-benchmarks.

    def test_stall_detection(ftbench_scenario):
        result = ftbench_scenario("stall-one-rank", sets={"faults.0.duration_s": 8}, point="duration_s=8",
                                  metric="ttd_s", trials=5)
        assert result.outcomes() == {"recovered": 5}
        assert result.median() < 5.5

With pytest-benchmark active (``--benchmark-autosave``, ``--benchmark-json``,
``--benchmark-compare``), the chosen figure's values, one per trial, become the
"rounds" of the test's benchmark: pytest-benchmark's tables, storage and comparisons
then treat a recovery latency like any timing. The medians of every other figure go
into ``extra_info``. With ``--benchmark-disable`` (or without pytest-benchmark) the
scenario still runs and the result is returned; nothing is stored.

Registered through the ``pytest11`` entry point, so this module is imported by every
pytest session of an environment that has ftbench: it imports nothing heavy at the top.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from bench.results.reader import Run


@dataclass
class ScenarioResult:
    """The run a fixture call made, narrowed to one point and one figure."""

    run: Run
    """The run (all points, all figures)."""
    point_hash: str
    label: str
    metric: str

    @property
    def path(self) -> Path:
        return Path(self.run.path)

    def values(self, metric: str | None = None) -> list[float]:
        """The figure's values that exist, one per fault trial of the point."""
        return self.run.values(self.point_hash, metric or self.metric)

    def median(self, metric: str | None = None) -> float:
        from bench.results.stats import median

        return median(self.values(metric))

    def outcomes(self) -> dict[str, int]:
        return self.run.outcomes(self.point_hash)


class FtbenchScenario:
    """What the ``ftbench_scenario`` fixture gives a test: call it to run a scenario, or
    :meth:`record` an existing results directory."""

    def __init__(self, request: pytest.FixtureRequest, out: Path) -> None:
        self._request = request
        self._out = out
        self._used = False

    def __call__(
        self,
        scenario: str | Path,
        *,
        metric: str | None = None,
        point: str | None = None,
        trials: int | None = None,
        sets: Mapping[str, Any] | Sequence[str] = (),
        out: str | Path | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> ScenarioResult:
        """Run ``scenario`` (a catalogue name or a TOML file) and record ``metric`` (by
        default the scenario's ``gate.metric``) of ``point`` (a label; needed when the
        scenario has several points, since a test has one benchmark)."""
        from bench.run.runner import run
        from bench.scenario import catalogue
        from bench.scenario.loader import load
        from bench.scenario.overrides import parse_override

        self._benchmark()  # first: --benchmark-skip skips the test before a scenario runs
        overrides = [parse_override(s) for s in sets] if not isinstance(sets, Mapping) else list(sets.items())
        sc = load(catalogue.resolve(str(scenario)), overrides)
        report = run(sc, out=Path(out) if out else self._out, trials=trials, progress=progress or (lambda _line: None))
        return self.record(report.rundir.path, metric=metric, point=point)

    def record(self, run_dir: str | Path, *, metric: str | None = None, point: str | None = None) -> ScenarioResult:
        """Put one point's figure from an existing results directory into this test's
        pytest-benchmark entry."""
        from bench.results.reader import load
        from bench.results.stats import median
        from bench.scenario.figures import is_figure, unit

        if self._used:
            raise RuntimeError(
                "ftbench_scenario records one point per test (pytest-benchmark keeps one "
                "benchmark per test); parametrize the test to record several"
            )
        run = load(run_dir)
        metric = metric or run.gate_spec().metric
        if not is_figure(metric):
            raise ValueError(f"metric {metric!r} is not a figure of trials.csv")
        pts = run.points()
        chosen = [p for p in pts if point is None or p["label"] == point]
        if len(chosen) != 1:
            labels = ", ".join(p["label"] for p in pts)
            raise ValueError(
                f"choose one point with point=... (labels: {labels})"
                if point is None
                else f"no point labelled {point!r} (labels: {labels})"
            )
        p = chosen[0]
        result = ScenarioResult(run=run, point_hash=p["point_hash"], label=p["label"], metric=metric)
        self._used = True
        extra = {
            "ftbench_run": str(run.path),
            "point": p["label"],
            "point_hash": p["point_hash"],
            "metric": metric,
            "unit": unit(metric),
            "outcomes": result.outcomes(),
        }
        for col in run.trials.columns:
            if is_figure(col):
                vals = result.values(col)
                if vals:
                    extra[f"median_{col}"] = median(vals)
        store_rounds(self._benchmark(), result.values(), extra)
        return result

    def _benchmark(self) -> Any:
        try:
            return self._request.getfixturevalue("benchmark")
        except pytest.FixtureLookupError:
            return None  # pytest-benchmark is not installed: run, return, store nothing


def store_rounds(benchmark: Any, values: list[float], extra: dict[str, Any]) -> None:
    """Feed the values to pytest-benchmark as the rounds of this test's benchmark.

    pytest-benchmark has no public call for measurements taken elsewhere; this uses the
    fixture's ``_make_stats`` (what its own ``pedantic`` uses, stable since 3.x) and
    marks the fixture used, as ``benchmark(...)`` would. Values that do not exist
    (NaN) are not rounds; a point with none is recorded as no benchmark at all."""
    if benchmark is None:
        return
    if getattr(benchmark, "_mode", None):
        raise RuntimeError("the benchmark fixture was already used in this test")
    benchmark._mode = "ftbench_scenario(...)"
    benchmark.extra_info.update(extra)
    if benchmark.disabled or not values:
        return
    make_stats = getattr(benchmark, "_make_stats", None)
    if make_stats is None:
        raise RuntimeError(
            "this pytest-benchmark has no BenchmarkFixture._make_stats; ftbench cannot store "
            "figures in it (use `ftbench export --format pytest-benchmark` instead)"
        )
    stats = make_stats(1)
    for v in values:
        if not math.isnan(v):
            stats.update(v)


@pytest.fixture
def ftbench_scenario(request: pytest.FixtureRequest, tmp_path: Path) -> FtbenchScenario:
    """Run an ftbench scenario (results under the test's ``tmp_path`` unless ``out=``
    is given) and store one of its figures in pytest-benchmark; see the module doc."""
    return FtbenchScenario(request, tmp_path / "ftbench-results")
