"""Stack knobs: NCCL's environment, torchrun's rendezvous timeouts, and the rank spec a
results folder holds (data that cannot choose the code or the environment a rank runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.rank.entry import RankSpec, spec_from_json, spec_to_json
from bench.scenario.config import ConfigError
from bench.scenario.loader import load, point_hash, points
from bench.scenario.strategy import STRATEGIES
from bench.scenario.workload import WORKLOADS

BASE = """
name = "k"
[workload]
kind = "allreduce"
world_size = 2
steps = 50
backend = "{backend}"
[recovery]
strategy = "{strategy}"
{extra}
"""


def scenario(write_scenario, *, backend: str = "auto", strategy: str = "failstop", extra: str = "") -> Path:
    return write_scenario(BASE.format(backend=backend, strategy=strategy, extra=extra))


def test_nccl_knobs_become_the_ranks_environment(write_scenario) -> None:
    extra = """
[launch.nccl]
async_error_handling = 3
blocking_wait = false
dump_on_timeout = true
trace_buffer_size = 2000
extra = { NCCL_DEBUG = "WARN" }
"""
    sc = load(scenario(write_scenario, backend="nccl", extra=extra))
    assert sc.launch.nccl.environment() == {
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
        "TORCH_NCCL_BLOCKING_WAIT": "0",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "NCCL_DEBUG": "WARN",
    }


def test_unset_nccl_knobs_leave_the_point_hash_alone(write_scenario) -> None:
    plain = points(load(scenario(write_scenario)))[0]
    empty = points(load(scenario(write_scenario, extra="[launch.nccl]\n")))[0]
    assert plain.point_hash == empty.point_hash == point_hash(plain.scenario)


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ('[launch.nccl]\nextra = { LD_PRELOAD = "/tmp/x.so" }', "launch.nccl.extra.LD_PRELOAD"),
        ('[launch.nccl]\nextra = { nccl_debug = "INFO" }', "launch.nccl.extra.nccl_debug"),
        ("[launch.nccl]\nasync_error_handling = 4", "launch.nccl.async_error_handling"),
        ("[launch.nccl]\nblocking_wait = 1", "launch.nccl.blocking_wait"),
    ],
)
def test_bad_nccl_knobs_name_their_key(write_scenario, extra: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(scenario(write_scenario, backend="nccl", extra=extra))
    assert info.value.key == key


def test_nccl_knobs_on_a_gloo_point_are_refused(write_scenario) -> None:
    with pytest.raises(ConfigError) as info:
        load(scenario(write_scenario, backend="gloo", extra="[launch.nccl]\nblocking_wait = true"))
    assert info.value.key == "launch.nccl"


def test_rendezvous_knobs_become_rdzv_conf(write_scenario) -> None:
    extra = "[recovery.restart]\nrdzv_join_timeout_s = 20\nrdzv_heartbeat_timeout_s = 2"
    params = load(scenario(write_scenario, strategy="restart", extra=extra)).recovery.params
    assert params.rdzv_conf() == "join_timeout=20,heartbeat_timeout=2"
    assert load(scenario(write_scenario, strategy="restart")).recovery.params.rdzv_conf() == ""


def spec(write_scenario) -> RankSpec:
    sc = load(scenario(write_scenario, strategy="restart"))
    strategy = STRATEGIES["restart"]
    return RankSpec(
        rank=-1,
        members=(0, 1),
        events_dir="/tmp/e",
        entry=strategy.rank_entry,
        policy=strategy.rank_policy,
        workload=sc.workload,
        workload_impl=WORKLOADS[sc.workload.kind].impl,
        recovery=sc.recovery,
        backend="gloo",
        seed=1,
        wait_s=10.0,
        env={"NCCL_DEBUG": "WARN"},
    )


def test_a_spec_round_trips(write_scenario) -> None:
    original = spec(write_scenario)
    assert spec_from_json(spec_to_json(original), file="spec.json") == original


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"entry": "os:system"}, "entry"),
        ({"workload_impl": "subprocess:call"}, "workload_impl"),
        ({"env": {"LD_PRELOAD": "/tmp/evil.so"}}, "env.LD_PRELOAD"),
        ({"env": {"PYTHONPATH": "/tmp"}}, "env.PYTHONPATH"),
    ],
)
def test_a_tampered_spec_cannot_choose_code_or_environment(write_scenario, change: dict, key: str) -> None:
    raw = json.loads(spec_to_json(spec(write_scenario))) | change
    with pytest.raises(ConfigError) as info:
        spec_from_json(json.dumps(raw), file="spec.json")
    assert info.value.key == key
