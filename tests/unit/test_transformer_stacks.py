"""Which stack serves which layout of the transformer (torchft: hsdp only), and a sweep
that leaves the combinations validation refuses out with their reasons
(``sweep.refused = "skip"``) instead of refusing the whole scenario."""

from __future__ import annotations

import pytest

from bench.scenario.config import ConfigError
from bench.scenario.loader import expand, load
from bench.strategies.torchft import group_size

BASE = """
name = "t"
[workload]
kind = "transformer"
world_size = 4
steps = 20
parallelism = "{parallelism}"
replicas = 2
[recovery]
strategy = "torchft"
{extra}
"""


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp"])
def test_torchft_serves_the_transformer_under_hsdp_only(write_scenario, parallelism: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(write_scenario(BASE.format(parallelism=parallelism, extra="")))
    assert err.value.key == "workload.parallelism"
    assert "'hsdp' with strategy torchft" in err.value.expected and "live" in err.value.expected


def test_torchft_hsdp_has_replica_groups_of_the_shard_size(write_scenario) -> None:
    sc = load(write_scenario(BASE.format(parallelism="hsdp", extra="")))
    assert group_size(sc.workload) == 2


def test_torchft_hsdp_refuses_the_native_group(write_scenario) -> None:
    extra = '[recovery.torchft]\nprocess_group = "native"'
    with pytest.raises(ConfigError) as err:
        load(write_scenario(BASE.format(parallelism="hsdp", extra=extra)))
    assert err.value.key == "recovery.torchft.process_group"


def test_torchft_hsdp_quorum_counts_groups_not_ranks(write_scenario) -> None:
    extra = "[recovery.torchft]\nmin_replicas = 3"
    with pytest.raises(ConfigError) as err:
        load(write_scenario(BASE.format(parallelism="hsdp", extra=extra)))
    assert err.value.key == "recovery.torchft.min_replicas" and "at most 2" in err.value.expected


SWEEP = """
[sweep]
"workload.parallelism" = ["fsdp", "hsdp"]
"recovery.strategy" = ["failstop", "torchft"]
"""


def test_a_refused_combination_refuses_the_scenario_by_default(write_scenario) -> None:
    with pytest.raises(ConfigError) as err:
        load(write_scenario(BASE.format(parallelism="hsdp", extra="") + SWEEP))
    assert "with sweep workload.parallelism = 'fsdp', recovery.strategy = 'torchft'" in err.value.expected
    assert 'sweep.refused = "skip"' in err.value.expected


def test_skip_leaves_refused_combinations_out_with_the_reason(write_scenario) -> None:
    sc = load(write_scenario(BASE.format(parallelism="hsdp", extra="") + SWEEP + 'refused = "skip"\n'))
    pts, refused = expand(sc)
    assert [p.label for p in pts] == [
        "parallelism=fsdp strategy=failstop",
        "parallelism=hsdp strategy=failstop",
        "parallelism=hsdp strategy=torchft",
    ]
    (label, why), *_ = refused.items()
    assert label == "parallelism=fsdp strategy=torchft" and "workload.parallelism" in why


def test_skip_that_leaves_nothing_is_refused(write_scenario) -> None:
    sweep = '[sweep]\n"workload.parallelism" = ["ddp", "fsdp"]\nrefused = "skip"\n'
    with pytest.raises(ConfigError) as err:
        load(write_scenario(BASE.format(parallelism="hsdp", extra="") + sweep))
    assert err.value.key == "sweep.refused"


def test_an_unknown_refused_policy_is_refused(write_scenario) -> None:
    with pytest.raises(ConfigError) as err:
        load(write_scenario(BASE.format(parallelism="hsdp", extra="") + SWEEP + 'refused = "ignore"\n'))
    assert err.value.key == "sweep.refused" and err.value.got == "ignore"
