"""Fits of state-moving phases against bytes: a known line is recovered, its interval
holds the slope, and nothing is fitted from too little; the ddp workload's state_mb knob
sizes the model it says and leaves it alone at 0; validate refuses a state that cannot fit."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pandas as pd
import pytest
import torch

from bench.results.statefit import GB, StateFit, fit_state_phases, varies
from bench.scenario.config import ConfigError
from bench.scenario.loader import load
from bench.scenario.memory import machine_limit
from bench.workloads.ddp import STATE_BYTES_PER_PARAM, DDPParams, memory, mlp_params, state_params
from bench.workloads.ddp.impl import DDPWorkload

SIZES = (0.5e6, 10e6, 100e6, 1000e6)


def rows(strategy: str, slope_s_per_gb: float, intercept: float, noise: float, per_size: int = 3) -> list[dict]:
    rng = random.Random(7)
    out = []
    for b in SIZES:
        for _ in range(per_size):
            out.append(
                {
                    "strategy": strategy,
                    "restore_bytes": b,
                    "restore_s": intercept + slope_s_per_gb * b / GB + rng.gauss(0, noise),
                    "checkpoint_bytes": b,
                    "checkpoint_blocked_s": 0.01 + 2 * slope_s_per_gb * b / GB + rng.gauss(0, noise),
                }
            )
    return out


def test_fit_recovers_a_known_slope_inside_its_interval() -> None:
    df = pd.DataFrame(rows("restart", 1.5, 0.2, 0.02) + rows("reinit", 0.3, 0.01, 0.005))
    fits = {(f.strategy, f.phase): f for f in fit_state_phases(df)}
    assert set(fits) == {
        ("restart", "restore"),
        ("restart", "checkpoint_blocked"),
        ("reinit", "restore"),
        ("reinit", "checkpoint_blocked"),
    }
    r = fits[("restart", "restore")]
    assert r.s_per_gb == pytest.approx(1.5, rel=0.05)
    assert r.low <= 1.5 <= r.high and r.low < r.s_per_gb < r.high
    assert r.intercept_s == pytest.approx(0.2, abs=0.03)
    assert (r.n, r.min_bytes, r.max_bytes) == (12, SIZES[0], SIZES[-1])
    assert fits[("restart", "checkpoint_blocked")].s_per_gb == pytest.approx(3.0, rel=0.05)
    q = fits[("reinit", "restore")]
    assert q.low <= 0.3 <= q.high and q.s_per_gb == pytest.approx(0.3, rel=0.1)


def test_fit_is_deterministic_and_exact_without_noise() -> None:
    df = pd.DataFrame(rows("restart", 2.0, 0.5, 0.0))
    a, b = fit_state_phases(df), fit_state_phases(df)
    assert a == b
    f = a[0]
    assert isinstance(f, StateFit)
    assert f.s_per_gb == pytest.approx(2.0) and f.low == pytest.approx(2.0) and f.high == pytest.approx(2.0)


def test_too_few_sizes_or_rows_give_no_fit() -> None:
    one_size = pd.DataFrame(
        [{"strategy": "restart", "restore_bytes": 1e6, "restore_s": 0.1 + i / 100} for i in range(6)]
    )
    assert fit_state_phases(one_size) == []
    assert not varies(one_size)
    two_rows = pd.DataFrame(
        [
            {"strategy": "restart", "restore_bytes": 1e6, "restore_s": 0.1},
            {"strategy": "restart", "restore_bytes": 1e9, "restore_s": 1.1},
        ]
    )
    assert fit_state_phases(two_rows) == []
    # Rows whose figure does not exist (NaN) do not count.
    holes = pd.DataFrame(rows("reinit", 1.0, 0.0, 0.0, per_size=1))
    holes.loc[1:, "restore_s"] = math.nan
    assert [f.phase for f in fit_state_phases(holes)] == ["checkpoint_blocked"]
    assert fit_state_phases(pd.DataFrame()) == []


def test_state_mb_zero_leaves_the_model_as_it_was() -> None:
    plain = DDPWorkload(DDPParams(), seed=3, world_size=4, device=torch.device("cpu"))
    zero = DDPWorkload(DDPParams(state_mb=0), seed=3, world_size=4, device=torch.device("cpu"))
    a, b = plain.model.state_dict(), zero.model.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert sum(p.numel() for p in plain.model.parameters()) == mlp_params(DDPParams()) == state_params(DDPParams())
    assert not zero.sized


@pytest.mark.parametrize("mb", [0.5, 8.0, 40.0])
def test_state_mb_sizes_parameters_plus_momentum(mb: float) -> None:
    p = DDPParams(state_mb=mb)
    w = DDPWorkload(p, seed=3, world_size=4, device=torch.device("cpu"))
    n = sum(t.numel() for t in w.model.parameters() if t.requires_grad)
    assert n == state_params(p)
    assert n * STATE_BYTES_PER_PARAM == pytest.approx(mb * 1e6, rel=0.01)
    # The task (teacher) and the MLP's weights are the same at every size.
    plain = DDPWorkload(DDPParams(), seed=3, world_size=4, device=torch.device("cpu"))
    assert torch.equal(w.teacher, plain.teacher)
    mlp = w.model.mlp.state_dict()  # type: ignore[union-attr]
    assert all(torch.equal(mlp[k], v) for k, v in plain.model.state_dict().items())


def test_validate_refuses_a_state_that_cannot_fit(write_scenario) -> None:  # type: ignore[no-untyped-def]
    text = """
    name = "big"
    description = "d"
    [workload]
    kind = "ddp"
    world_size = 4
    steps = 10
    pg_timeout_s = 5
    state_mb = {mb}
    [[faults]]
    kind = "kill"
    target = {{ ranks = [2] }}
    trigger = {{ at_step = 5 }}
    [recovery]
    strategy = "reinit"
    """
    assert load(write_scenario(text.format(mb=10), name="ok.toml"))
    huge = DDPParams(state_mb=65536)
    if 4 * memory(huge, 4).total < machine_limit()[0]:
        pytest.skip("this machine has room for 4 ranks of 64 GB of state")
    path: Path = write_scenario(text.format(mb=65536), name="big.toml")
    with pytest.raises(ConfigError) as info:
        load(path)
    assert "big.toml: workload.state_mb" in str(info.value) and "a state in flight" in str(info.value)


def test_report_has_the_state_size_section_only_where_bytes_vary(tmp_path: Path) -> None:
    from bench.report import make_report
    from tests.unit.runfactory import trial, write_run

    def rows_of(slope: float) -> list[dict]:
        return [
            trial(0.01, 0.5 + slope * b / GB, restore_s=0.05 + slope * b / GB * (1 + k / 50), restore_bytes=b)
            for b in SIZES
            for k in range(2)
        ]

    swept = write_run(
        tmp_path / "a", "state-scaling", {"strategy=restart": rows_of(1.0), "strategy=reinit": rows_of(0.2)}
    )
    files = make_report([swept])
    md = files.markdown.read_text()
    assert "## Phase time against state size" in md
    assert "| restart | restore |" in md and "| reinit | restore |" in md
    png = [p for p in files.images if p.name.startswith("statesize_")]
    assert len(png) == 1 and png[0].read_bytes()[:4] == b"\x89PNG"
    flat = write_run(tmp_path / "b", "kill", {"strategy=reinit": [trial(0.01, 0.04) for _ in range(4)]})
    assert "state size" not in make_report([flat]).markdown.read_text()


def test_each_checkpoint_design_of_a_stack_gets_its_own_line(tmp_path: Path) -> None:
    """A run that swept the design (gpu-checkpoints) fits each design apart: one line
    through two designs' saves would be neither's cost per GB."""
    import json

    from bench.results.reader import load as load_run
    from bench.results.statefit import by_design, checkpoint_designs
    from tests.unit.runfactory import trial, write_run

    def rows_of(slope: float) -> list[dict]:
        return [
            trial(0.01, 1.0, restore_s=0.02 + slope * b / GB, restore_bytes=b, checkpoint_bytes=b)
            for b in SIZES[2:]
            for _ in range(2)
        ]

    run = write_run(
        tmp_path,
        "gpu-checkpoints",
        {"design=torch-save": rows_of(2.0), "design=dcp": rows_of(0.5), "strategy=reinit": rows_of(0.1)},
        strategy="restart",
    )
    info = json.loads((run / "run.json").read_text())
    for p in info["points"]:
        if p["label"].startswith("design="):
            p["config"]["recovery"]["params"] = {"checkpoint": p["label"].split("=")[1]}
    (run / "run.json").write_text(json.dumps(info))
    r = load_run(run)
    trials = by_design(r.measured(), checkpoint_designs(r))
    assert list(dict.fromkeys(trials["strategy"])) == ["restart (torch-save)", "restart (dcp)", "reinit"]
    fits = {(f.strategy, f.phase): f for f in fit_state_phases(trials)}
    assert fits[("restart (torch-save)", "restore")].s_per_gb == pytest.approx(2.0)
    assert fits[("restart (dcp)", "restore")].s_per_gb == pytest.approx(0.5)
    assert fits[("reinit", "restore")].s_per_gb == pytest.approx(0.1)  # one design (none): its plain name
