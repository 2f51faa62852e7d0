"""Which torch a point runs, and the strategies that need a newer one (``Strategy.torch``):
a point that cannot be served is skipped with the reason, a scenario with no servable
point is refused up front."""

from __future__ import annotations

import importlib.metadata

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.scenario.config import ConfigError
from bench.scenario.loader import load, points, stack_gap
from bench.scenario.requirements import torch_of

HARNESS_TORCH = importlib.metadata.version("torch")
OLD = HARNESS_TORCH.startswith(("2.13.", "2.12.", "2.11.", "2.10."))

SCENARIO = """
name = "tv"
[workload]
kind = "ddp"
world_size = 3
steps = 40
pg_timeout_s = 5
[[faults]]
kind = "kill"
target = {{ ranks = [1] }}
trigger = {{ at_step = 10 }}
[recovery]
strategy = "torch-reconfigure"
[sweep]
"launch.env" = {envs}
"""


def test_the_torch_of_a_point() -> None:
    assert torch_of("torch==2.15.0 torchft-nightly") == ("2.15.0", "pinned by launch.env")
    assert torch_of("torch>=2.14") is None  # known only once the environment is built
    assert torch_of("") == (HARNESS_TORCH, "installed here")
    assert torch_of("torchft==0.2.0") == (HARNESS_TORCH, "installed here")  # torch comes from the harness


def test_a_point_on_an_old_torch_is_skipped_with_the_reason(write_scenario) -> None:
    sc = load(write_scenario(SCENARIO.format(envs='["torch==2.13.0", "torch==2.15.0"]')))
    old, new = (stack_gap(p.scenario) for p in points(sc))
    assert old == (
        "torch-reconfigure needs torch >=2.14; this point runs torch 2.13.0 (pinned by launch.env): "
        "try --env torch==2.15.0"
    )
    assert new is None
    out = CliRunner().invoke(cli, ["validate", str(sc.source)])
    assert out.exit_code == 0 and "skipped here: env=torch==2.13.0: torch-reconfigure needs" in out.output


def test_a_scenario_no_point_of_which_can_run_is_refused(write_scenario) -> None:
    path = write_scenario(SCENARIO.format(envs='["torch==2.13.0", "torch==2.12.1"]'))
    with pytest.raises(ConfigError, match=r"recovery.strategy: expected a strategy the stack of some point serves"):
        load(path)
    out = CliRunner().invoke(cli, ["validate", str(path)])
    assert out.exit_code == 2 and "needs torch >=2.14; this point runs torch 2.13.0" in out.output


@pytest.mark.skipif(not OLD, reason=f"the harness's own torch {HARNESS_TORCH} serves torch-reconfigure")
def test_the_harness_torch_is_named_when_nothing_pins_one(write_scenario) -> None:
    path = write_scenario(SCENARIO.format(envs='[""]'))
    out = CliRunner().invoke(cli, ["run", str(path), "--trials", "1", "--out", str(path.parent)])
    assert out.exit_code == 2
    assert f"this point runs torch {HARNESS_TORCH} (installed here)" in out.output


NVRX_LAUNCHER = """
name = "nvrx-pin"
[workload]
kind = "ddp"
world_size = 2
steps = 20
[recovery]
strategy = "nvrx-launcher"
[sweep]
"launch.env" = {envs}
"""


def test_an_nvrx_release_the_launcher_cannot_drive_is_skipped_or_refused(write_scenario) -> None:
    # NVRx 0.5 removed fault_tolerance._torch_elastic_compat; 0.4.1 still has it.
    sc = load(
        write_scenario(NVRX_LAUNCHER.format(envs='["nvidia-resiliency-ext==0.5.0", "nvidia-resiliency-ext==0.4.1"]'))
    )
    new, old = (stack_gap(p.scenario) for p in points(sc))
    assert new is not None and "nvidia-resiliency-ext 0.5.0 is outside <0.5" in new and "_torch_elastic_compat" in new
    assert old is None
    path = write_scenario(NVRX_LAUNCHER.format(envs='["nvidia-resiliency-ext==0.6.0"]'))
    with pytest.raises(ConfigError, match=r"expected a strategy the stack of some point serves .*0\.6\.0 is outside"):
        load(path)
