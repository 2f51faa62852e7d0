"""Scenario validation: every kind of bad input names the file, the key and what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scenario.config import ConfigError
from bench.scenario.loader import load, point_hash, points
from bench.scenario.overrides import parse_override

GOOD = """
name = "t"
description = "d"
[workload]
kind = "ddp"
world_size = 4
steps = 100
pg_timeout_s = 5
[[faults]]
kind = "stall"
duration_s = 8
target = { ranks = [1] }
trigger = { at_step = 20 }
[recovery]
strategy = "reinit"
[recovery.reinit]
join_window_s = 0.25
[measure]
trials = 3
[sweep]
"faults.0.duration_s" = [8, 3]
"recovery.strategy" = ["failstop", "reinit"]
"""


def error_of(write_scenario, text: str) -> ConfigError:
    path = write_scenario(text)
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(path) in str(info.value)
    return info.value


def test_good_scenario_expands_its_sweep(write_scenario) -> None:
    sc = load(write_scenario(GOOD))
    pts = points(sc)
    assert [p.label for p in pts] == [
        "duration_s=8 strategy=failstop",
        "duration_s=8 strategy=reinit",
        "duration_s=3 strategy=failstop",
        "duration_s=3 strategy=reinit",
    ]
    assert pts[0].scenario.faults[0].params.duration_s == 8.0
    assert pts[3].scenario.recovery.params.join_window_s == 0.25
    assert len({p.point_hash for p in pts}) == 4


def test_point_hash_is_stable_and_ignores_trials_and_name(write_scenario) -> None:
    a = points(load(write_scenario(GOOD)))
    b = points(load(write_scenario(GOOD.replace("trials = 3", "trials = 9").replace('name = "t"', 'name = "u"'))))
    assert [p.point_hash for p in a] == [p.point_hash for p in b]
    c = points(load(write_scenario(GOOD.replace("steps = 100", "steps = 101"))))
    assert a[0].point_hash != c[0].point_hash
    assert point_hash(a[0].scenario) == a[0].point_hash


def test_set_override_replaces_a_sweep_axis(write_scenario) -> None:
    sc = load(
        write_scenario(GOOD), [parse_override("recovery.strategy=reinit"), parse_override("workload.world_size=3")]
    )
    pts = points(sc)
    assert [p.label for p in pts] == ["duration_s=8", "duration_s=3"]
    assert all(p.scenario.workload.world_size == 3 for p in pts)


def test_override_values_are_read_as_toml_else_string() -> None:
    assert parse_override("a.b=3") == ("a.b", 3)
    assert parse_override("a.b=0.5") == ("a.b", 0.5)
    assert parse_override("a.b=[1, 2]") == ("a.b", [1, 2])
    assert parse_override("a.b=reinit") == ("a.b", "reinit")
    with pytest.raises(ConfigError):
        parse_override("nokey")


@pytest.mark.parametrize(
    ("change", "key", "expected"),
    [
        (("[measure]", "[measure]\ntrails = 3"), "measure.trails", "one of"),
        (("[workload]", "[workload]\nworld_size_ = 4"), "workload.world_size_", "for kind 'ddp'"),
        (('description = "d"', 'description = "d"\ncolour = 1'), "colour", "one of"),
        (("world_size = 4", 'world_size = "4"'), "workload.world_size", "an integer"),
        (("world_size = 4", "world_size = 1"), "workload.world_size", ">= 2"),
        (("pg_timeout_s = 5", "pg_timeout_s = -1"), "workload.pg_timeout_s", "> 0"),
        (('kind = "ddp"', 'kind = "dpp"'), "workload.kind", "'allreduce', 'command', 'ddp' or 'transformer'"),
        (('kind = "stall"', 'kind = "stal"'), "faults.0.kind", "'kill'"),
        (("duration_s = 8", "duration_s = 0"), "faults.0.duration_s", "> 0"),
        (
            ('strategy = "reinit"\n[recovery.reinit]', 'strategy = "reboot"\n[recovery.reinit]'),
            "recovery.strategy",
            "one of",
        ),
        (("[recovery.reinit]", "[recovery.reboot]"), "recovery.reboot", "a table named after a strategy"),
        (("join_window_s = 0.25", "join_window = 0.25"), "recovery.reinit.join_window", "one of"),
        (("target = { ranks = [1] }", "target = { ranks = [4] }"), "faults.0.target.ranks.0", "below world_size"),
        (("target = { ranks = [1] }", "target = { ranks = [1, 1] }"), "faults.0.target.ranks", "distinct"),
        (
            ("target = { ranks = [1] }", "target = { ranks = [0, 1, 2, 3] }"),
            "faults.0.target.ranks",
            "someone must survive",
        ),
        (
            ("trigger = { at_step = 20 }", "trigger = { at_step = 100 }"),
            "faults.0.trigger.at_step",
            "below workload.steps",
        ),
        (
            ("trigger = { at_step = 20 }", "trigger = { at_step = 20, after_s = 1.0 }"),
            "faults.0.trigger",
            "exactly one",
        ),
        (("trigger = { at_step = 20 }", "trigger = { on_step = 20 }"), "faults.0.trigger.on_step", "one of"),
        (
            ('"faults.0.duration_s" = [8, 3]', '"faults.0.duration_s" = [8, -3]'),
            "faults.0.duration_s",
            "with sweep faults.0.duration_s = -3",
        ),
        (
            ('"faults.0.duration_s" = [8, 3]', '"faults.3.duration_s" = [8, 3]'),
            "sweep.faults.3.duration_s.0",
            "index an existing entry",
        ),
        (
            ('"faults.0.duration_s" = [8, 3]', '"faults.0.duration_s" = []'),
            "sweep.faults.0.duration_s",
            "non-empty list",
        ),
        (("trials = 3", "trials = 0"), "measure.trials", ">= 1"),
        (("[sweep]", '[gate]\nmetric = "speed"\n[sweep]'), "gate.metric", "a figure"),
    ],
)
def test_bad_input_names_file_key_and_expectation(write_scenario, change, key, expected) -> None:
    old, new = change
    assert old in GOOD
    err = error_of(write_scenario, GOOD.replace(old, new, 1))
    assert err.key == key, str(err)
    assert expected in str(err)
    assert "\n" not in str(err)


def test_invalid_toml_is_one_clear_line(write_scenario) -> None:
    err = error_of(write_scenario, "name = \n")
    assert "valid TOML" in str(err)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="a readable file"):
        load(tmp_path / "absent.toml")


def test_fault_needs_target_and_trigger(write_scenario) -> None:
    err = error_of(write_scenario, GOOD.replace("target = { ranks = [1] }\n", ""))
    assert err.key == "faults.0.target" and "required" in str(err)


def test_defaults_fill_a_minimal_file(write_scenario) -> None:
    sc = load(
        write_scenario(
            '[[faults]]\nkind = "kill"\ntarget = { ranks = [0] }\ntrigger = { after_s = 1 }\n', name="minimal.toml"
        )
    )
    assert sc.name == "minimal"
    assert sc.workload.kind == "ddp" and sc.recovery.strategy == "failstop"
    assert sc.faults[0].params.signal == "SIGKILL"
    assert len(points(sc)) == 1 and points(sc)[0].label == "minimal"


def test_named_scenarios_are_valid() -> None:
    from bench.scenario import catalogue

    names = catalogue.named()
    assert {"kill-one-rank", "stall-one-rank", "allreduce-kill"} <= set(names)
    for path in names.values():
        assert points(load(path))


HOSTS = """
name = "h"
[workload]
kind = "ddp"
world_size = 4
steps = 100
[launch]
ranks_per_host = 2
agents = true
[[faults]]
kind = "host-down"
target = { host = 1 }
trigger = { at_step = 20 }
[recovery]
strategy = "restart"
[recovery.restart]
min_nodes = 1
"""


@pytest.mark.parametrize(
    ("change", "key", "expected"),
    [
        (("agents = true", "agents = false"), "faults.0", "launch.agents = true and target = { host = k }"),
        (("target = { host = 1 }", "target = { ranks = [2] }"), "faults.0", "takes a host's agent away"),
        (("min_nodes = 1", "min_nodes = 3"), "recovery.restart.min_nodes", "at most the number of hosts (2)"),
    ],
)
def test_a_lost_host_needs_host_agents_and_min_nodes_counts_hosts(write_scenario, change, key, expected) -> None:
    assert points(load(write_scenario(HOSTS)))[0].scenario.recovery.params.min_nodes == 1
    old, new = change
    err = error_of(write_scenario, HOSTS.replace(old, new, 1))
    assert err.key == key, str(err)
    assert expected in str(err)


def test_link_faults_run_under_agents_on_one_machine_only(write_scenario) -> None:
    from bench.run.trial import unavailable

    text = HOSTS.replace('kind = "host-down"', 'kind = "partition"\nduration_s = 5').replace("restart", "reinit")
    sc = points(load(write_scenario(text.replace("[recovery.reinit]\nmin_nodes = 1\n", ""))))[0].scenario
    why = unavailable(sc, cluster=True)
    assert why is not None and "link faults on a cluster's hosts" in why
    assert "link faults" not in (unavailable(sc, cluster=False) or "")
