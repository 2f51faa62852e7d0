"""ray-train without a cluster: its declaration, its knobs, how a node is started, and
the shared pieces it leans on (a rank's namespace by the host it was seen on, no hooks
to arm outside the main thread). Nothing here starts Ray (tests/integ/test_ray_train.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from bench.run.schedule import ScheduledFault, TrialState
from bench.scenario.config import ConfigError
from bench.scenario.crosscheck import uses_namespaces
from bench.scenario.loader import load, points
from bench.scenario.model import Scenario
from bench.scenario.strategy import STRATEGIES
from bench.strategies.ray_train import RayTrainParams
from bench.strategies.ray_train.cluster import GCS_PORT, PORTS, Node
from injectors.rankside import install

BASE = """
name = "t"
[workload]
kind = "ddp"
world_size = 4
steps = 50
pg_timeout_s = 5
[launch]
ranks_per_host = 2
[[faults]]
kind = "kill"
target = { ranks = [2] }
trigger = { at_step = 20 }
[recovery]
strategy = "ray-train"
"""


def _load(tmp_path: Path, extra: str = "") -> Scenario:
    path = tmp_path / "s.toml"
    path.write_text(BASE + extra)
    return points(load(path))[0].scenario


def test_declared_as_a_stock_stack_on_namespaced_hosts() -> None:
    s = STRATEGIES["ray-train"]
    assert not s.own_design and s.namespaced_hosts and s.host_commands and s.namespaces
    assert not s.rank_side_faults, "the training function runs in a thread: no signal-armed hooks"
    assert [p for p, _ in s.phases][:3] == ["controller", "decision", "teardown"]
    assert s.packages[0].module == "ray"


def test_its_points_always_run_hosts_in_namespaces(tmp_path: Path) -> None:
    assert uses_namespaces(_load(tmp_path))


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ('network = "loopback"\n', "launch.network"),
        ("agents = true\n", "launch.agents"),
        ("[recovery.ray-train]\nmin_workers = 5\n", "recovery.ray-train.min_workers"),
        ("[recovery.ray-train]\nhealth_check_interval_s = 0\n", "health_check_interval_s"),
        ("[recovery.ray-train]\nnode_health_check_failure_threshold = 0\n", "node_health_check_failure_threshold"),
        ("[recovery.ray-train]\nworker_group_start_timeout = 5\n", "worker_group_start_timeout"),
    ],
)
def test_bad_knobs_are_one_line_naming_the_key(tmp_path: Path, extra: str, key: str) -> None:
    text = BASE.replace("[launch]\n", "[launch]\n" + extra) if not extra.startswith("[") else BASE + extra
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_knobs_become_ray_s_own_environment_variables() -> None:
    p = RayTrainParams(health_check_interval_s=0.2, node_health_check_period_ms=500)
    assert p.driver_env()["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] == "0.2"
    assert p.driver_env()["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] == "60.0"  # Ray's default
    assert p.node_env()["RAY_health_check_period_ms"] == "500"
    assert p.node_env()["RAY_health_check_failure_threshold"] == "5"  # Ray's default


def test_every_port_and_the_address_of_a_node_are_explicit() -> None:
    head, worker = Node(0, "ftb-x-h0", "198.18.0.1", 2), Node(1, "ftb-x-h1", "198.18.0.2", 2)
    h, w = head.ray_start(head.address), worker.ray_start(head.address)
    assert "--head" in h and f"--port={GCS_PORT}" in h and "--include-dashboard=false" in h
    assert f"--address=198.18.0.1:{GCS_PORT}" in w and "--head" not in w
    for args, node in ((h, head), (w, worker)):
        assert "--block" in args and f"--node-ip-address={node.address}" in args and "--num-cpus=2" in args
        assert all(f"--{name}={port}" in args for name, port in PORTS.items())
    command = worker.command(head.address)
    assert command[2:4] == ["bench.strategies.ray_train.cluster", "ftb-x-h1"]
    assert command[command.index("--") + 1 :] == w


def test_a_link_fault_hits_the_namespace_of_the_host_a_rank_was_seen_on(tmp_path: Path) -> None:
    scenario = _load(tmp_path)
    fault = ScheduledFault(
        0, scenario.faults[0], seed=0, trial=0, ranks_per_host=2, namespaces={r: f"ns-h{r // 2}" for r in range(4)}
    )
    state = TrialState()
    assert fault._namespace(state, 0) == "ns-h0"  # launch order, where nothing was seen
    state.hosts[0] = "h1"  # Ray put rank 0 on h1
    assert fault._namespace(state, 0) == "ns-h1"


def test_no_hooks_to_arm_is_fine_outside_the_main_thread() -> None:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            install([])
        except BaseException as err:  # pragma: no cover (the failure being tested for)
            errors.append(err)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert not errors


def test_without_ray_its_points_are_skipped_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from bench.strategies.ray_train.job import RayTrainJob

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name.startswith("ray") else real(name, *a)
    )
    why = RayTrainJob.unavailable(_load(tmp_path))
    assert why is not None and "ftbench[ray]" in why


def test_a_node_keeps_the_entries_of_the_machine_s_tmp_that_the_trial_lives_in(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.strategies.ray_train.cluster import interpreter_paths, kept

    monkeypatch.chdir("/")  # "relative" is then /relative, outside /tmp wherever the checkout is

    paths = ["/tmp/pytest-of-root/p1/results/x", "/tmp/venv/bin/python", "/work/results/y", "/tmp", "relative"]
    assert kept(paths) == ["pytest-of-root", "venv"]
    head = Node(0, "ftb-x-h0", "198.18.0.1", 2)
    argv = head.command(head.address, ["pytest-of-root"])
    end = argv.index("--")
    assert argv[3] == "ftb-x-h0"
    # The interpreter's own places (a checkout or venv under /tmp) are kept without being asked for.
    wanted = {"pytest-of-root", *kept(interpreter_paths())}
    assert argv[4:end] == [f"--keep={name}" for name in sorted(wanted)]
