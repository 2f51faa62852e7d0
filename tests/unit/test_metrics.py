"""Figures computed from hand-written event logs with known answers."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from bench.results.derive import fault_figures
from bench.results.facts import trial_facts

MS = 1_000_000


def ev(t_ms: float, event: str, **fields: Any) -> dict[str, Any]:
    return {"t": round(t_ms * MS), "event": event, **fields}


def steps(
    ranks: list[int], first: int, last: int, t0_ms: float, every_ms: float = 10.0, gen: int = 0, loss: float = 0.25
) -> list[dict[str, Any]]:
    out = []
    for i, step in enumerate(range(first, last + 1)):
        for r in ranks:
            out.append(
                ev(
                    t0_ms + i * every_ms + 0.1 * r,
                    "step_end",
                    src="rank",
                    rank=r,
                    step=step,
                    gen=gen,
                    step_s=every_ms / 1000,
                    world_size=len(ranks),
                    loss_share=loss / len(ranks),
                )
            )
    return out


def train_end(ranks: list[int], t_ms: float, gen: int) -> list[dict[str, Any]]:
    return [ev(t_ms, "train_end", src="rank", rank=r, gen=gen) for r in ranks]


def figures(events: list[dict[str, Any]], *, steps_total: int = 20, faults=(("kill", "2"),), **kw: Any):
    events = sorted(events, key=lambda e: e["t"])
    kw.setdefault("phases", (("reconfigure", "reconfigured"), ("restore", "restore_end")))
    return fault_figures(events, faults=list(faults), steps=steps_total, warmup_steps=0, **kw)


def recovered_kill(extra: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """4 ranks, rank 2 killed after step 10; survivors re-form and finish 20 steps."""
    e = steps([0, 1, 2, 3], 1, 10, t0_ms=10)
    e += [
        ev(100.5, "inject", src="harness", fault=0, kind="kill", ranks=[2]),
        ev(108.0, "detect", src="agent", how="exit", of_rank=2),
        ev(110.0, "detect", src="rank", rank=1, how="peer_closed"),
        ev(112.0, "detect", src="rank", rank=0, how="peer_abort"),
        ev(113.0, "detect", src="rank", rank=3, how="peer_abort"),
        ev(113.5, "detect", src="rank", rank=3, how="peer_abort"),  # a second detect: only the first counts
        *[ev(115.0 - 0.5 * i, "isolate", src="rank", rank=r, gen=1) for i, r in enumerate([0, 1, 3])],
        *[ev(118.0 + i, "reconfigured", src="rank", rank=r, gen=1) for i, r in enumerate([0, 1, 3])],
    ]
    e += steps([0, 1, 3], 11, 20, t0_ms=131.7, gen=1)  # rank 3 ends step 11 at 132.0
    e += train_end([0, 1, 3], 240, gen=1)
    return e + (extra or [])


def test_recovered_kill_known_answers() -> None:
    (f,) = figures(recovered_kill())
    assert f.outcome == "recovered" and f.error == ""
    fig = f.figures
    assert fig["ttd_s"] == pytest.approx(0.0075)  # the agent's exit detection
    assert fig["ttd_all_s"] == pytest.approx(0.0125)  # rank 3's first detect
    assert fig["ttr_s"] == pytest.approx(0.132 - 0.108)  # last member's end of step 11, gen 1
    assert fig["downtime_s"] == pytest.approx(fig["ttd_s"] + fig["ttr_s"])
    assert fig["steps_lost"] == 0
    assert fig["degraded_step_ratio"] == pytest.approx(1.0)
    assert math.isnan(fig["loss_delta"])  # no reference: the figure does not exist


def test_phases_add_up_to_downtime() -> None:
    (f,) = figures(
        recovered_kill(), phases=(("isolate", "isolate"), ("reconfigure", "reconfigured"), ("restore", "restore_end"))
    )
    p = f.phases
    assert p["phase_detect_s"] == pytest.approx(0.0075)
    assert p["phase_isolate_s"] == pytest.approx(0.115 - 0.108)
    assert p["phase_reconfigure_s"] == pytest.approx(0.120 - 0.115)
    assert math.isnan(p["phase_restore_s"])  # no state transfer happened
    assert p["phase_catchup_s"] == pytest.approx(0.132 - 0.120)
    present = [v for v in p.values() if not math.isnan(v)]
    assert sum(present) == pytest.approx(f.figures["downtime_s"])


def test_replayed_step_counts_as_lost_and_as_recovery_time() -> None:
    e = recovered_kill()
    # rank 0 had committed step 11 just before the others failed in it: step 11 is replayed
    e.append(ev(105.0, "step_end", src="rank", rank=0, step=11, gen=0, step_s=0.01, world_size=4))
    (f,) = figures(e)
    assert f.figures["steps_lost"] == 1
    # the first good step is 12 (past the last committed step), not the replayed 11
    assert f.figures["ttr_s"] == pytest.approx(0.142 - 0.108)


def test_failstop_has_detection_only() -> None:
    e = steps([0, 1, 2, 3], 1, 10, t0_ms=10) + [
        ev(100.5, "inject", src="harness", fault=0, kind="kill", ranks=[2]),
        ev(105.0, "detect", src="rank", rank=1, how="peer_closed"),
        ev(106.0, "detect", src="agent", how="exit", of_rank=2),
        ev(130.0, "detect", src="rank", rank=3, how="peer_closed"),
        ev(131.0, "detect", src="rank", rank=0, how="peer_closed"),
    ]
    (f,) = figures(e)
    assert f.outcome == "failed"
    assert f.figures["ttd_s"] == pytest.approx(0.0045)
    assert f.figures["ttd_all_s"] == pytest.approx(0.0305)
    for name in ("ttr_s", "downtime_s", "steps_lost", "degraded_step_ratio"):
        assert math.isnan(f.figures[name]), name


def test_survivors_taken_down_by_the_stack_are_counted_and_named() -> None:
    """torchft 0.2.0's DDP: the survivors detect the death, then its comm hook's assert
    kills them; the victim's own crash does not count."""
    hook = 'Traceback (most recent call last):\n  File "/site/torchft/ddp.py", line 76, in _comm_hook\n'
    e = steps([0, 1, 2, 3], 1, 10, t0_ms=10) + [
        ev(100.5, "inject", src="harness", fault=0, kind="kill", ranks=[2]),
        ev(101.0, "crash", src="rank", rank=2, error="RuntimeError: victim"),
        ev(105.0, "detect", src="rank", rank=1, how="peer_closed"),
        ev(106.0, "crash", src="rank", rank=1, error="AssertionError: ", traceback=hook),
        ev(107.0, "crash", src="rank", rank=3, error="AssertionError: ", traceback=hook),
    ]
    (f,) = figures(e)
    assert f.outcome == "failed"
    assert f.figures["survivor_crashes"] == 2
    assert f.error == "survivors crashed: rank 1, 3 (AssertionError at ddp.py:76 in _comm_hook)"
    (f,) = figures(recovered_kill())
    assert f.figures["survivor_crashes"] == 0 and f.error == ""


def test_ttd_all_is_empty_when_a_survivor_never_detected() -> None:
    e = [x for x in recovered_kill() if not (x["event"] == "detect" and x.get("rank") == 3)]
    (f,) = figures(e)
    assert math.isnan(f.figures["ttd_all_s"])
    assert f.figures["ttd_s"] == pytest.approx(0.0075)


def test_absorbed_stall_and_the_victims_own_detection_does_not_count() -> None:
    e = steps([0, 1, 2], 1, 10, t0_ms=10) + [
        ev(100.5, "inject", src="harness", fault=0, kind="stall", ranks=[1]),
        ev(3100.0, "detect", src="rank", rank=1, how="timeout"),  # the stalled rank itself
    ]
    e += steps([0, 1, 2], 11, 20, t0_ms=3110, every_ms=20)
    e += train_end([0, 1, 2], 3400, gen=0)
    (f,) = figures(e, faults=(("stall", "1"),))
    assert f.outcome == "absorbed"
    assert math.isnan(f.figures["ttd_s"]) and math.isnan(f.figures["ttr_s"])
    assert f.figures["steps_lost"] == 0
    assert f.figures["degraded_step_ratio"] == pytest.approx(2.0)


def test_hung_keeps_the_figures_it_has() -> None:
    e = steps([0, 1, 2, 3], 1, 10, t0_ms=10) + [
        ev(100.5, "inject", src="harness", fault=0, kind="kill", ranks=[2]),
        ev(105.0, "detect", src="rank", rank=1, how="peer_closed"),
        ev(60_000, "trial_end", src="harness", outcome="hung"),
    ]
    (f,) = figures(e)
    assert f.outcome == "hung" and "deadline" in f.error
    assert f.figures["ttd_s"] == pytest.approx(0.0045)


def test_fault_never_injected_still_has_a_row() -> None:
    e = steps([0, 1, 2, 3], 1, 20, t0_ms=10) + train_end([0, 1, 2, 3], 300, gen=0)
    (f,) = figures(e)
    assert f.outcome == "not_injected" and f.kind == "kill" and f.target == "2"
    assert all(math.isnan(v) for v in f.figures.values())


def test_fault_free_trial_and_reference_figures() -> None:
    e = steps([0, 1], 1, 20, t0_ms=10, loss=0.5) + train_end([0, 1], 300, gen=0)
    (f,) = figures(e, faults=())
    assert f.kind == "none" and f.outcome == "completed"
    s = trial_facts(sorted(e, key=lambda x: x["t"]), steps=20, warmup_steps=0)
    assert s.final_loss == pytest.approx(0.5) and s.ff_step_s == pytest.approx(0.01)
    assert s.completed and s.steps_done == 20


def test_loss_delta_and_goodput_against_a_reference() -> None:
    reference = trial_facts(
        steps([0, 1], 1, 20, t0_ms=10, every_ms=5, loss=0.2) + train_end([0, 1], 200, gen=0), steps=20, warmup_steps=0
    )
    (f,) = figures(recovered_kill(), reference=reference)
    assert f.figures["loss_delta"] == pytest.approx(0.25 - 0.2)
    # 20 distinct steps x 5 ms / (first step start 0 ms .. last rank event 240 ms)
    assert f.figures["goodput"] == pytest.approx(20 * 0.005 / 0.240)
    assert f.figures["degraded_step_ratio"] == pytest.approx(2.0)


def test_restart_phases_from_recorded_agent_and_worker_events() -> None:
    from bench.scenario.strategy import STRATEGIES

    e = steps([0, 1, 2], 1, 10, t0_ms=10) + [
        ev(100.5, "inject", src="harness", fault=0, kind="kill", ranks=[1]),
        ev(110.0, "detect", src="rank", rank=0, how="peer_closed"),
        ev(112.0, "detect", src="rank", rank=2, how="peer_closed"),
        ev(200.0, "detect", src="agent", how="agent_monitor"),
        ev(201.0, "teardown_start", src="agent"),
        ev(205.0, "teardown_end", src="agent"),
        ev(205.5, "rendezvous_start", src="agent"),
        ev(500.0, "rendezvous_end", src="agent"),
        ev(510.0, "workers_started", src="agent"),
        *[ev(3000.0 + 100 * r, "import_done", src="rank", rank=r) for r in range(3)],
        *[ev(4000.0 + 100 * r, "workload_ready", src="rank", rank=r) for r in range(3)],
        *[ev(4300.0 + 10 * r, "reconfigured", src="rank", rank=r, gen=1) for r in range(3)],
        *[ev(4340.0 + 5 * r, "restore_end", src="rank", rank=r, how="disk", step=5) for r in range(3)],
    ]
    e += steps([0, 1, 2], 6, 20, t0_ms=4400, gen=1)  # steps 6-10 replayed from the checkpoint of step 5
    e += train_end([0, 1, 2], 4600, gen=1)
    (f,) = figures(e, faults=(("kill", "1"),), phases=STRATEGIES["restart"].phases)
    assert f.outcome == "recovered"
    assert f.figures["steps_lost"] == 5
    expected = {
        "detect": 9.5,
        "agent": 90,
        "teardown": 5,
        "rendezvous": 295,
        "spawn": 10,
        "import": 2690,
        "build": 1000,
        "pg": 120,
        "restore": 30,
        "catchup": 4450.2 - 4350,
    }
    for name, ms in expected.items():
        assert f.phases[f"phase_{name}_s"] == pytest.approx(ms / 1000), name
    # Ranks on the CPU stamp no CUDA context and no upload: those phases are empty, and
    # the ones present still add up to the downtime.
    assert math.isnan(f.phases["phase_cuda_s"]) and math.isnan(f.phases["phase_upload_s"])
    assert sum(v for v in f.phases.values() if not math.isnan(v)) == pytest.approx(f.figures["downtime_s"])
    assert f.figures["ttr_s"] == pytest.approx((4450.2 - 110) / 1000)


def test_a_restarted_gpu_worker_has_its_cuda_context_and_upload_as_phases() -> None:
    """The same restart with the workers on a GPU: the CUDA context (``cuda_ready``) and
    the move of model and optimizer to the device (``upload_end``) split what was the
    import and the build, in the order a worker does them."""
    from bench.scenario.strategy import STRATEGIES

    e = steps([0, 1], 1, 10, t0_ms=10) + [
        ev(100.5, "inject", src="harness", fault=0, kind="kill", ranks=[1]),
        ev(110.0, "detect", src="rank", rank=0, how="peer_closed"),
        ev(200.0, "detect", src="agent", how="agent_monitor"),
        ev(205.0, "teardown_end", src="agent"),
        ev(500.0, "rendezvous_end", src="agent"),
        ev(510.0, "workers_started", src="agent"),
        *[ev(3000.0 + 100 * r, "import_done", src="rank", rank=r) for r in range(2)],
        *[ev(3500.0 + 100 * r, "cuda_ready", src="rank", rank=r, device=0, cuda_init_s=0.5) for r in range(2)],
        *[ev(3800.0 + 100 * r, "workload_ready", src="rank", rank=r) for r in range(2)],
        *[ev(3850.0 + 100 * r, "upload_end", src="rank", rank=r, bytes=10**6, upload_s=0.05) for r in range(2)],
        *[ev(4300.0 + 10 * r, "reconfigured", src="rank", rank=r, gen=1) for r in range(2)],
        *[ev(4340.0 + 5 * r, "restore_end", src="rank", rank=r, how="disk", step=5) for r in range(2)],
    ]
    e += steps([0, 1], 6, 20, t0_ms=4400, gen=1)
    e += train_end([0, 1], 4600, gen=1)
    (f,) = figures(e, faults=(("kill", "1"),), phases=STRATEGIES["restart"].phases)
    assert f.outcome == "recovered"
    expected = {"import": 3100 - 510, "cuda": 500, "build": 300, "upload": 50, "pg": 4310 - 3950}
    for name, ms in expected.items():
        assert f.phases[f"phase_{name}_s"] == pytest.approx(ms / 1000), name
    assert sum(f.phases.values()) == pytest.approx(f.figures["downtime_s"])


def test_rank_detection_phase_in_the_step_and_the_interposer() -> None:
    """ttd_rank_s ignores the supervisor's earlier exit notice; the injection came 0.4
    steps after the victim's last step end (step 10 of rank 2 ended at 100.2 ms, the
    inject at 104.2 ms, 10 ms steps); the interposer is what the ranks reported."""
    e = recovered_kill([ev(5.0, "train_start", src="rank", rank=r, interposer="none") for r in (0, 1, 2, 3)])
    for x in e:
        if x["event"] == "inject":
            x["t"] = round(104.2 * MS)
        if x["event"] == "detect" and x.get("rank") == 1:
            x["site"] = "backward"
    (f,) = figures(e)
    assert f.figures["ttd_s"] == pytest.approx(0.0038)  # the supervisor's notice, at 108 ms
    assert f.figures["ttd_rank_s"] == pytest.approx(0.0058)  # rank 1's exception, at 110 ms
    assert f.figures["inject_phase"] == pytest.approx(0.4)
    assert (f.interposer, f.detect_how, f.detect_site) == ("none", "exit", "backward")
    row = f.row()
    assert row["interposer"] == "none" and row["detect_how"] == "exit"


def test_goodput_is_a_share_even_when_the_world_after_recovery_steps_faster() -> None:
    """Three ranks on two cores step faster than four: counted at the fault-free step
    time, 100 steps of 10 ms in 0.8 s of wall would be 125 % of it. A share stays <= 1."""
    from bench.results.facts import goodput

    facts = SimpleNamespace(train_start_ns=0, train_end_ns=800_000_000, steps_done=100)
    assert goodput(facts, 0.010) == 1.0  # type: ignore[arg-type]
    facts.train_end_ns = 2_000_000_000
    assert goodput(facts, 0.010) == pytest.approx(0.5)  # type: ignore[arg-type]
