"""The ``checkpoint`` knob of the stacks that checkpoint: what validation accepts and
refuses (and why), and the checkpoint figures computed from a trial's events."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.rank.checkpoint import DESIGNS, IMPLS, NEEDS_CUDA, unavailable
from bench.results.checkpoints import checkpoint_figures
from bench.scenario.config import ConfigError
from bench.scenario.figures import BY_NAME
from bench.scenario.loader import load

BASE = """
name = "c"
[workload]
kind = "ddp"
world_size = {world}
steps = 50
backend = "{backend}"
[recovery]
strategy = "{strategy}"
[recovery.{strategy}]
checkpoint = "{design}"
"""

STACKS = ("restart", "nvrx-launcher", "nvrx-inprocess")


def scenario(write_scenario, *, strategy: str, design: str, backend: str = "gloo", world: int = 4) -> Path:
    text = BASE.format(strategy=strategy, design=design, backend=backend, world=world)
    return write_scenario(text)


def test_every_design_has_an_implementation() -> None:
    assert set(IMPLS) == set(DESIGNS)


@pytest.mark.parametrize("strategy", STACKS)
def test_the_default_is_torch_save(write_scenario, strategy: str) -> None:
    text = BASE.format(strategy=strategy, design="torch-save", backend="gloo", world=4)
    sc = load(write_scenario(text.replace('checkpoint = "torch-save"', "")))
    assert sc.recovery.params.checkpoint == "torch-save"


@pytest.mark.parametrize("strategy", STACKS)
def test_an_unknown_design_names_the_allowed_ones(write_scenario, strategy: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(scenario(write_scenario, strategy=strategy, design="pickle"))
    assert err.value.key == f"recovery.{strategy}.checkpoint"
    for design in DESIGNS:
        assert repr(design) in err.value.expected


@pytest.mark.parametrize("strategy", STACKS)
@pytest.mark.parametrize("design", ["torch-save", "dcp", "dcp-async"])
def test_designs_that_run_on_gloo_validate(write_scenario, strategy: str, design: str) -> None:
    assert load(scenario(write_scenario, strategy=strategy, design=design)).recovery.params.checkpoint == design


@pytest.mark.parametrize("strategy", STACKS)
def test_nvrx_async_on_gloo_is_refused_with_the_reason(write_scenario, strategy: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(scenario(write_scenario, strategy=strategy, design="nvrx-async"))
    assert err.value.key == f"recovery.{strategy}.checkpoint"
    assert "torch.cuda.synchronize" in str(err.value)


def test_nvrx_async_with_backend_auto_validates_and_is_skipped_without_gpus(write_scenario) -> None:
    sc = load(scenario(write_scenario, strategy="restart", design="nvrx-async", backend="auto"))
    import torch

    why = unavailable("nvrx-async", sc.workload.backend, sc.workload.device, sc.workload.world_size)
    if torch.cuda.device_count() >= sc.workload.world_size:
        assert why is None
    else:
        assert why is not None and NEEDS_CUDA["nvrx-async"] in why


@pytest.mark.parametrize("strategy", ["restart", "nvrx-launcher"])
def test_nvrx_local_needs_pairs_of_ranks(write_scenario, strategy: str) -> None:
    assert load(scenario(write_scenario, strategy=strategy, design="nvrx-local")).recovery.params.checkpoint
    with pytest.raises(ConfigError, match="multiple of 2"):
        load(scenario(write_scenario, strategy=strategy, design="nvrx-local", world=3))


def test_nvrx_local_under_in_process_restart_is_refused(write_scenario) -> None:
    with pytest.raises(ConfigError, match="survivors") as err:
        load(scenario(write_scenario, strategy="nvrx-inprocess", design="nvrx-local"))
    assert err.value.key == "recovery.nvrx-inprocess.checkpoint"


def saved(rank: int, step: int, blocked: float, t: int, nbytes: int | None = None, gen: int = 0) -> dict:
    e = {"event": "checkpoint", "t": t, "rank": rank, "gen": gen, "step": step, "blocked_s": blocked}
    return e | {"save_s": blocked} | ({"bytes": nbytes} if nbytes is not None else {})


def test_figures_of_a_synchronous_design_take_the_slowest_rank_and_every_rank_s_bytes() -> None:
    events = [
        saved(0, 10, 0.2, 1, 100),
        saved(1, 10, 0.4, 2, 10),
        saved(0, 20, 0.1, 3, 100),
        saved(1, 20, 0.3, 4, 20),
    ]
    f = checkpoint_figures(events)
    assert f["checkpoint_s"] == pytest.approx(0.4 + 0.3)
    assert f["checkpoint_blocked_s"] == pytest.approx(0.35)
    assert f["checkpoint_bytes"] == 120
    assert math.isnan(f["checkpoint_background_s"])


def test_figures_of_an_asynchronous_design_read_bytes_and_background_from_done() -> None:
    done = [
        {"event": "checkpoint_done", "t": 9, "rank": r, "gen": 0, "step": 10, "background_s": 1.0 + r, "bytes": 50}
        for r in (0, 1)
    ]
    f = checkpoint_figures([saved(0, 10, 0.01, 1), saved(1, 10, 0.02, 2), *done])
    assert f["checkpoint_blocked_s"] == pytest.approx(0.02)
    assert f["checkpoint_background_s"] == pytest.approx(2.0)
    assert f["checkpoint_bytes"] == 100


def test_torch_save_events_of_before_the_knob_give_the_same_figures() -> None:
    old = [{"event": "checkpoint", "t": i, "step": 10 * i, "bytes": 7, "save_s": 0.5} for i in (1, 2)]
    f = checkpoint_figures(old)
    assert f["checkpoint_s"] == 1.0 and f["checkpoint_bytes"] == 7 and f["checkpoint_blocked_s"] == 0.5


def test_no_saves_no_figures() -> None:
    assert all(math.isnan(v) for v in checkpoint_figures([]).values())


def test_the_new_figures_are_in_the_table_per_trial() -> None:
    for name in ("checkpoint_blocked_s", "checkpoint_background_s", "checkpoint_bytes", "checkpoint_s"):
        assert BY_NAME[name].per == "trial"


def test_the_report_tables_the_designs_only_for_runs_that_saved(tmp_path: Path) -> None:
    from bench.report import checkpoints
    from bench.report.blocks import Report
    from bench.report.series import build_series
    from bench.results.reader import load as load_run
    from tests.unit.runfactory import trial, write_run

    saves = {"checkpoint_blocked_s": 0.02, "checkpoint_background_s": 0.5, "checkpoint_bytes": 26e6}
    run = write_run(
        tmp_path,
        "designs",
        {"strategy=restart": [trial(0.01, 9.0, restore_s=0.2, **saves)], "strategy=failstop": [trial(0.01)]},
        config={"recovery": {"strategy": "restart", "params": {"checkpoint": "dcp-async"}}},
    )
    df = checkpoints.table(build_series([load_run(run)]))
    assert list(df["point"]) == ["strategy=restart", "strategy=failstop"]
    row = df.iloc[0]
    assert row["design"] == "dcp-async"
    assert row["blocked per save"] == "20 ms (n=1)" and row["background per save"] == "500 ms (n=1)"
    assert row["bytes per save"] == "26 MB (n=1)" and row["restore"] == "200 ms (n=1)"
    rep = Report()
    checkpoints.section(rep, build_series([load_run(run)]))
    assert [b.text for b in rep.blocks if b.kind == "h2"] == ["Checkpoint designs"]
    plain = write_run(tmp_path / "plain", "kill", {"strategy=failstop": [trial(0.01)]})
    empty = Report()
    checkpoints.section(empty, build_series([load_run(plain)]))
    assert empty.blocks == []
