"""The NVRx strategies' figures and phases from hand-written event logs, and their pure
harness-side logic (NVRx's timeout rules, ft_launcher's configuration, the observers).

The event sequences follow what a real trial records (tests/integ/test_nvrx.py runs
them): under ``nvrx-inprocess`` the survivors' loop sees the gloo error, their NVRx
monitor threads are notified, abort, finalize, pass NVRx's iteration barrier and train
again in iteration 1; under ``nvrx-launcher`` a rank monitor's heartbeat timeout kills a
stalled worker and the agent restarts the group.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import pytest

from bench.probe.site.ftbench_probe_agents import instrument_agent
from bench.results.derive import fault_figures
from bench.scenario.config import ConfigError
from bench.scenario.loader import parse
from bench.scenario.strategy import STRATEGIES
from bench.strategies.nvrx_launcher import NVRxLauncherParams
from bench.strategies.nvrx_launcher.job import ft_config, launcher_args

MS = 1_000_000
STEPS = 60
HAS_NVRX = importlib.util.find_spec("nvidia_resiliency_ext") is not None


def ev(t_ms: float, event: str, **fields: Any) -> dict[str, Any]:
    return {"t": round(t_ms * MS), "event": event, **fields}


def steps(ranks: dict[int, int], first: int, last: int, t0_ms: float, gen: int) -> list[dict[str, Any]]:
    """``ranks``: launch rank -> group rank; 10 ms steps, loss shares summing to 0.3."""
    return [
        ev(
            t0_ms + 10 * i + 0.1 * r,
            "step_end",
            src="rank",
            rank=r,
            pid=100 + r,
            step=s,
            gen=gen,
            step_s=0.01,
            world_size=len(ranks),
            group_rank=g,
            loss_share=0.3 / len(ranks),
        )
        for i, s in enumerate(range(first, last + 1))
        for r, g in ranks.items()
    ]


def rank(t_ms: float, r: int, event: str, **fields: Any) -> dict[str, Any]:
    return ev(t_ms, event, src="rank", rank=r, pid=100 + r, **fields)


def inprocess_kill() -> list[dict[str, Any]]:
    """Rank 2 of 3 killed after step 30 (checkpoint at 25): NVRx restarts 0 and 1 in-process."""
    e = steps({0: 0, 1: 1, 2: 2}, 1, 30, t0_ms=0, gen=0)  # step 30 ends at 290.2 ms
    t = 295.0
    e += [ev(t, "inject", src="harness", fault=0, kind="kill", ranks=[2], pids=[102])]
    e += [rank(t + 10 + r, r, "detect", how="peer_closed", gen=0, step=31) for r in (0, 1)]
    e += [rank(t + 13 + r, r, "detect", how="nvrx_monitor_thread") for r in (0, 1)]
    e += [ev(t + 700, "nvrx_interrupted", src="nvrx_monitor", pid=202, of_rank=2, kind="terminated")]
    for r in (0, 1):
        e += [rank(t + 1013 + r, r, "nvrx_abort_start", iteration=0), rank(t + 1015 + r, r, "nvrx_abort_end")]
        e += [rank(t + 1020 + r, r, "nvrx_finalize_start"), rank(t + 1021 + r, r, "nvrx_finalize_end")]
        e += [rank(t + 1022 + r, r, "nvrx_restart_health_start"), rank(t + 1023 + r, r, "nvrx_restart_health_end")]
        e += [rank(t + 1030 + r, r, "nvrx_rank_assignment_start", terminated=[2])]
        e += [rank(t + 1031 + r, r, "nvrx_rank_assignment_end", world_size=2)]
        e += [rank(t + 1300 + r, r, "nvrx_initialize_start"), rank(t + 1301 + r, r, "nvrx_initialize_end")]
        e += [rank(t + 1302 + r, r, "nvrx_iteration_health_start")]
        e += [rank(t + 1303 + r, r, "nvrx_iteration_health_end")]
        e += [rank(t + 1310 + r, r, "pg_ready", gen=1), rank(t + 1310 + r, r, "reconfigured", gen=1, world_size=2)]
        e += [rank(t + 1312 + r, r, "restore_start", how="disk")]
        e += [rank(t + 1318 + r, r, "restore_end", how="disk", bytes=1000, step=25)]
    e += steps({0: 0, 1: 1}, 26, STEPS, t0_ms=t + 1330, gen=1)  # step 26 ends at t + 1331.1
    e += [rank(t + 1800, r, "train_end", step=STEPS, gen=1, digest="d", l1=1.0) for r in (0, 1)]
    # After training, NVRx's monitor processes record their finished ranks as terminated:
    # no detection of anything.
    e += [
        ev(t + 3000, "nvrx_interrupted", src="nvrx_monitor", pid=200 + r, of_rank=r, kind="terminated") for r in (0, 1)
    ]
    return sorted(e, key=lambda x: x["t"])


def figures(events: list[dict[str, Any]], strategy: str, kind: str = "kill") -> Any:
    (f,) = fault_figures(events, faults=[(kind, "2")], steps=STEPS, warmup_steps=0, phases=STRATEGIES[strategy].phases)
    return f


def test_inprocess_kill_phases_follow_nvrx_restart() -> None:
    f = figures(inprocess_kill(), "nvrx-inprocess")
    assert f.outcome == "recovered", f.error
    fig, ph = f.figures, f.phases
    assert fig["ttd_s"] == pytest.approx(0.010) and fig["ttd_all_s"] == pytest.approx(0.011)
    assert f.detect_how == "peer_closed"
    assert ph["phase_abort_s"] == pytest.approx(1.016 - 0.010)  # NVRx's last-call wait, mostly
    assert ph["phase_finalize_s"] == pytest.approx(1.022 - 1.016)
    assert ph["phase_restart_health_s"] == pytest.approx(1.024 - 1.022)
    assert ph["phase_barrier_s"] == pytest.approx(1.031 - 1.024)  # both at the barrier: assignment starts
    assert ph["phase_assign_s"] == pytest.approx(1.032 - 1.031)
    assert ph["phase_initialize_s"] == pytest.approx(1.302 - 1.032)
    assert ph["phase_iteration_health_s"] == pytest.approx(1.304 - 1.302)
    assert ph["phase_pg_s"] == pytest.approx(1.311 - 1.304)
    assert ph["phase_restore_s"] == pytest.approx(1.319 - 1.311)
    assert fig["ttr_s"] == pytest.approx(1.3801 - 0.010)  # step 31: the replayed 26..30 count as recovery
    assert sum(ph.values()) == pytest.approx(fig["downtime_s"])
    assert fig["steps_lost"] == 30 - 25  # resumed from the checkpoint of step 25


def test_inprocess_detection_by_nvrx_alone() -> None:
    """A kill between collectives: no gloo error, the survivors learn it from NVRx's
    monitor threads (the victim's monitor process recorded it)."""
    events = [e for e in inprocess_kill() if not (e["event"] == "detect" and e.get("how") == "peer_closed")]
    f = figures(events, "nvrx-inprocess")
    assert f.outcome == "recovered"
    assert f.detect_how == "nvrx_monitor_thread"
    assert f.figures["ttd_s"] == pytest.approx(0.013)


def test_records_after_training_are_no_detection() -> None:
    """A fault nothing noticed stays undetected although NVRx's monitor processes record
    the finished ranks as terminated at the end."""
    events = [e for e in inprocess_kill() if e["event"] != "detect" and not e["event"].startswith("nvrx_abort")]
    events = [e for e in events if not (e["event"] == "step_end" and e["gen"] == 1)]
    f = figures(events, "nvrx-inprocess")
    assert math.isnan(f.figures["ttd_s"])
    assert f.outcome in ("failed", "absorbed")


def launcher_stall() -> list[dict[str, Any]]:
    """Rank 2 of 3 stopped after step 30; rank heartbeat timeout 2 s: its monitor (and the
    waiting survivors' ones) kill the workers, the agent restarts the group from step 25."""
    e = steps({0: 0, 1: 1, 2: 2}, 1, 30, t0_ms=0, gen=0)
    t = 295.0
    e += [ev(t, "inject", src="harness", fault=0, kind="stall", ranks=[2], pids=[102])]
    e += [ev(t + 2005, "detect", src="rank_monitor", pid=50, how="rank_monitor_heartbeat", of_rank=1)]
    e += [ev(t + 2010, "detect", src="rank_monitor", pid=51, how="rank_monitor_heartbeat", of_rank=2)]
    e += [ev(t + 2080, "detect", src="agent", how="agent_monitor", state="FAILED")]
    e += [ev(t + 2081, "teardown_start", src="agent"), ev(t + 2100, "teardown_end", src="agent")]
    e += [ev(t + 2101, "rendezvous_start", src="agent"), ev(t + 2260, "rendezvous_end", src="agent")]
    e += [ev(t + 2280, "workers_started", src="agent", pids=[300, 301, 302])]
    for r in range(3):
        e += [ev(t + 5000 + r, "import_done", src="rank", rank=r, pid=300 + r)]
        e += [ev(t + 7000 + r, "workload_ready", src="rank", rank=r, pid=300 + r)]
        e += [ev(t + 7400 + r, "reconfigured", src="rank", rank=r, pid=300 + r, gen=1, world_size=3)]
        e += [ev(t + 7410 + r, "restore_end", src="rank", rank=r, pid=300 + r, step=25)]
    e += steps({0: 0, 1: 1, 2: 2}, 26, STEPS, t0_ms=t + 7500, gen=1)
    return sorted(e, key=lambda x: x["t"])


def test_launcher_stall_is_detected_by_a_rank_monitor_before_the_agent() -> None:
    f = figures(launcher_stall(), "nvrx-launcher", kind="stall")
    assert f.outcome == "recovered", f.error
    ph = f.phases
    assert f.detect_how == "rank_monitor_heartbeat"
    assert f.figures["ttd_s"] == pytest.approx(2.005)
    assert math.isnan(f.figures["ttd_all_s"]), "the survivors were killed before they saw an error"
    assert ph["phase_agent_s"] == pytest.approx(2.080 - 2.005)
    assert ph["phase_rendezvous_s"] == pytest.approx(2.260 - 2.100)
    assert ph["phase_import_s"] == pytest.approx(5.002 - 2.280)
    # Workers on the CPU have no CUDA context or upload phase: the phases present add up.
    assert math.isnan(ph["phase_cuda_s"]) and math.isnan(ph["phase_upload_s"])
    assert sum(v for v in ph.values() if not math.isnan(v)) == pytest.approx(f.figures["downtime_s"])


def scenario(strategy: str, knobs: str, world_size: int = 3) -> Any:
    import tomllib

    text = f"""
    name = "t"
    [workload]
    kind = "ddp"
    world_size = {world_size}
    [recovery]
    strategy = "{strategy}"
    [recovery.{strategy}]
    {knobs}
    """
    return parse(tomllib.loads(text.replace("\n    ", "\n")), file="t.toml")


def test_inprocess_defaults_are_nvrx_defaults_and_pass_its_rules() -> None:
    s = scenario("nvrx-inprocess", "")
    p = s.recovery.params
    assert (p.soft_timeout_s, p.hard_timeout_s, p.barrier_timeout_s) == (60.0, 90.0, 120.0)
    assert (p.heartbeat_timeout_s, p.last_call_wait_s, p.termination_grace_time_s) == (30.0, 1.0, 5.0)


@pytest.mark.parametrize(
    ("knobs", "key"),
    [
        ("soft_timeout_s = 95", "soft_timeout_s"),  # past the hard timeout (90)
        ("heartbeat_interval_s = 30", "heartbeat_interval_s"),  # not below heartbeat_timeout_s
        ("progress_watchdog_interval_s = 60", "progress_watchdog_interval_s"),
        ("min_world_size = 4", "min_world_size"),
    ],
)
def test_inprocess_knobs_nvrx_would_refuse_are_refused_when_read(knobs: str, key: str) -> None:
    with pytest.raises(ConfigError, match=f"recovery.nvrx-inprocess.{key}"):
        scenario("nvrx-inprocess", knobs)


def test_ft_config_heartbeat_and_sections() -> None:
    beat = ft_config(NVRxLauncherParams(rank_heartbeat_timeout_s=2, workload_check_interval_s=0.2))
    assert beat["rank_heartbeat_timeout"] == 2 and beat["rank_section_timeouts"] == {}
    assert beat["rank_out_of_section_timeout"] is None and beat["workload_check_interval"] == 0.2
    sections = ft_config(NVRxLauncherParams(hang_detection="sections", step_section_timeout_s=3))
    assert sections["rank_heartbeat_timeout"] is None and sections["initial_rank_heartbeat_timeout"] is None
    assert sections["rank_section_timeouts"] == {"step": 3} and sections["rank_out_of_section_timeout"] == 3600
    args = launcher_args(NVRxLauncherParams(), nproc=4, rdzv_port=29500, run_id="r", cfg_path="/c.yaml")
    assert "--max-restarts=3" in args and "--ft-cfg-path=/c.yaml" in args and "--nproc-per-node=4" in args
    assert "--ft-restart-policy=any-failed" in args and "--rdzv-endpoint=127.0.0.1:29500" in args


def test_agent_instrumentation_records_and_passes_results_through() -> None:
    class State:
        def __init__(self, name: str) -> None:
            self.name = name

    failed, healthy = State("FAILED"), State("HEALTHY")

    class Result:
        def __init__(self, state: State) -> None:
            self.state, self.failures = state, {}

    class Agent:
        def __init__(self) -> None:
            self.states = [healthy, failed, failed, healthy]

        def _monitor_workers(self, _group: Any) -> Result:
            return Result(self.states.pop(0))

        def _stop_workers(self, _group: Any) -> None:
            return None

        def _rendezvous(self, _group: Any) -> None:
            return None

        def _start_workers(self, _group: Any) -> dict[int, int]:
            return {0: 11}

    class Events:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def emit(self, event: str, **_: Any) -> None:
            self.seen.append(event)

    events = Events()
    instrument_agent(Agent, events.emit, (failed,))
    agent = Agent()
    assert [agent._monitor_workers(None).state.name for _ in range(4)] == ["HEALTHY", "FAILED", "FAILED", "HEALTHY"]
    assert agent._start_workers(None) == {0: 11}
    agent._stop_workers(None)
    agent._rendezvous(None)
    assert events.seen == [
        "detect",  # once per failure, not per monitor pass
        "workers_started",
        "teardown_start",
        "teardown_end",
        "rendezvous_start",
        "rendezvous_end",
    ]


@pytest.mark.skipif(not HAS_NVRX, reason="nvidia_resiliency_ext is not installed")
def test_observers_are_nvrx_components_that_pass_through() -> None:
    from nvidia_resiliency_ext.inprocess import State
    from nvidia_resiliency_ext.inprocess.abort import Abort
    from nvidia_resiliency_ext.inprocess.attribution import Interruption, InterruptionRecord
    from nvidia_resiliency_ext.inprocess.health_check import FaultCounter, HealthCheck

    from bench.strategies.nvrx_inprocess.observe import ObservedAbort, ObservedHealthCheck, interruptions

    seen: list[tuple[str, dict[str, Any]]] = []
    emit = lambda event, **f: seen.append((event, f))
    state = State(rank=0, world_size=2).freeze()
    calls: list[Any] = []

    class Inner(Abort):
        def __call__(self, s: Any) -> Any:
            calls.append(s)
            return s

    abort = ObservedAbort(Inner(), emit)
    assert isinstance(abort, Abort) and abort(state) is state and calls == [state]
    assert [e for e, _ in seen] == ["nvrx_abort_start", "nvrx_abort_end"]
    seen.clear()
    check = ObservedHealthCheck(FaultCounter(), emit)
    assert isinstance(check, HealthCheck)
    check(state)  # at the start of iteration 0
    check(state)  # after a fault in iteration 0
    assert [e for e, _ in seen] == [
        "nvrx_iteration_health_start",
        "nvrx_iteration_health_end",
        "nvrx_restart_health_start",
        "nvrx_restart_health_end",
    ]
    record = InterruptionRecord(2, Interruption.TERMINATED)
    assert interruptions([[record], record, None]) == [record, record]
