"""blame_correct, tta_s and the false_alarm outcome from hand-written event logs."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.results.blame import named_ranks
from bench.scenario.strategy import STRATEGIES
from tests.unit.test_metrics import ev, figures, recovered_kill, steps, train_end

REINIT_BLAME = STRATEGIES["reinit"].blame


def test_reinit_evictions_blame_the_victim() -> None:
    (f,) = figures(recovered_kill(), blame=REINIT_BLAME)
    # recovered_kill's survivors isolate with gen only: give them what reinit records
    assert math.isnan(f.figures["blame_correct"]) and math.isnan(f.figures["tta_s"])
    extra = [ev(114.0 - 0.5 * i, "isolate", src="rank", rank=r, gen=1, excluded=[2]) for i, r in enumerate([0, 1, 3])]
    (f,) = figures(recovered_kill(extra), blame=REINIT_BLAME)
    assert f.figures["blame_correct"] == 1.0
    assert f.figures["tta_s"] == pytest.approx((113.0 - 100.5) / 1000)  # the first isolate, rank 3's


def test_wrong_blame_is_zero_and_a_superset_is_wrong() -> None:
    extra = [ev(114.0, "isolate", src="rank", rank=0, gen=1, excluded=[1, 2])]
    (f,) = figures(recovered_kill(extra), blame=REINIT_BLAME)
    assert f.figures["blame_correct"] == 0.0
    assert f.figures["tta_s"] == pytest.approx(0.0135)


def test_a_stack_that_blames_nobody_has_empty_cells_not_zero() -> None:
    extra = [ev(114.0, "isolate", src="rank", rank=0, gen=1, excluded=[2])]
    (f,) = figures(recovered_kill(extra))  # no blame declared (failstop-like)
    assert math.isnan(f.figures["blame_correct"]) and math.isnan(f.figures["tta_s"])
    empty = [ev(114.0, "isolate", src="rank", rank=0, gen=1, excluded=[])]
    (f,) = figures(recovered_kill(empty), blame=REINIT_BLAME)
    assert math.isnan(f.figures["blame_correct"]) and math.isnan(f.figures["tta_s"])


def test_blame_before_the_injection_or_by_a_victim_does_not_count() -> None:
    extra = [
        ev(50.0, "isolate", src="rank", rank=0, gen=0, excluded=[2]),  # before the fault
        ev(111.0, "isolate", src="rank", rank=2, gen=1, excluded=[0, 1, 3]),  # the victim accusing its peers
    ]
    (f,) = figures(recovered_kill(extra), blame=REINIT_BLAME)
    assert math.isnan(f.figures["blame_correct"])


def test_torchrun_first_failure_and_torchft_quorum_drop() -> None:
    agent = [ev(109.0, "detect", src="agent", how="agent_monitor", failures={"0": 1, "2": -9}, first_failure=0)]
    (f,) = figures(recovered_kill(agent), blame=STRATEGIES["restart"].blame)
    assert f.figures["blame_correct"] == 0.0  # torchrun's root cause is a survivor that crashed
    assert f.figures["tta_s"] == pytest.approx(0.0085)
    drop = [ev(120.5, "detect", src="lighthouse", how="quorum_drop", dropped=["replica_2"], dropped_ranks=[2])]
    (f,) = figures(recovered_kill(drop), blame=STRATEGIES["torchft"].blame)
    assert f.figures["blame_correct"] == 1.0 and f.figures["tta_s"] == pytest.approx(0.020)


def test_a_quorum_without_replicas_that_finished_training_blames_no_one() -> None:
    """torchft: the stalled replica wakes up after the others finished and forms a quorum
    alone; the replicas it leaves out were not accused, they were done."""
    drops = [
        ev(120.5, "detect", src="lighthouse", how="quorum_drop", dropped=["replica_2"], dropped_ranks=[2]),
        ev(150.0, "train_end", src="rank", rank=0, step=40),
        ev(150.0, "train_end", src="rank", rank=1, step=40),
        ev(150.0, "train_end", src="rank", rank=3, step=40),
        ev(160.0, "detect", src="lighthouse", how="quorum_drop", dropped_ranks=[0, 1, 3]),
    ]
    (f,) = figures(recovered_kill(drops), blame=STRATEGIES["torchft"].blame)
    assert f.figures["blame_correct"] == 1.0


def test_named_ranks_shapes() -> None:
    assert named_ranks(2) == {2} and named_ranks("3") == {3} and named_ranks([1, "2"]) == {1, 2}
    assert named_ranks({"0": 1, "2": -9}) == {0, 2}
    assert named_ranks(None) == set() and named_ranks(True) == set() and named_ranks("replica_2") == set()


def stall_trial(duration_s: float, tolerance_s: float | None, *, detected: bool) -> list[dict[str, Any]]:
    """3 ranks; rank 1 stalled after step 10 for ``duration_s``; a survivor's timeout
    fires (``detected``) and reinit goes on without it, or the stall is absorbed."""
    start = {"tolerance_s": tolerance_s} if tolerance_s is not None else {}
    e = [ev(0.0, "trial_start", src="harness", **start)]
    e += steps([0, 1, 2], 1, 10, t0_ms=10)
    e.append(ev(100.5, "inject", src="harness", fault=0, kind="stall", ranks=[1], duration_s=duration_s))
    end_ms = 100.5 + duration_s * 1000
    e.append(ev(end_ms, "fault_end", src="harness", fault=0, kind="stall"))
    if detected:
        e += [
            ev(1100.0, "detect", src="rank", rank=0, how="timeout"),
            ev(1101.0, "isolate", src="rank", rank=0, gen=1, excluded=[1]),
            ev(1102.0, "reconfigured", src="rank", rank=0, gen=1),
        ]
        e += steps([0, 2], 11, 20, t0_ms=1110, gen=1)
        e += train_end([0, 2], 1300, gen=1)
    else:
        e += steps([0, 1, 2], 11, 20, t0_ms=end_ms + 10)
        e += train_end([0, 1, 2], end_ms + 200, gen=0)
    return e


def test_false_alarm_a_detected_stall_shorter_than_the_timeout() -> None:
    (f,) = figures(stall_trial(0.9, 1.0, detected=True), faults=(("stall", "1"),), blame=REINIT_BLAME)
    assert f.outcome == "false_alarm"
    assert "0.9 s stall" in f.error and "1 s timeout" in f.error and "recovered" in f.error
    assert f.figures["ttd_s"] == pytest.approx(0.9995)  # the figures it did produce are kept
    assert f.figures["blame_correct"] == 1.0  # it blamed the right rank, too early


def test_a_stall_past_the_timeout_is_a_true_detection() -> None:
    (f,) = figures(stall_trial(1.5, 1.0, detected=True), faults=(("stall", "1"),))
    assert f.outcome == "recovered" and f.error == ""
    (f,) = figures(stall_trial(1.0, 1.0, detected=True), faults=(("stall", "1"),))
    assert f.outcome == "recovered"  # at the timeout is not within it


def test_no_false_alarm_without_a_detection_or_a_known_tolerance() -> None:
    (f,) = figures(stall_trial(0.5, 1.0, detected=False), faults=(("stall", "1"),))
    assert f.outcome == "absorbed"
    (f,) = figures(stall_trial(0.9, None, detected=True), faults=(("stall", "1"),))
    assert f.outcome == "recovered"  # an old run: no tolerance recorded, nothing to judge by


def test_a_stragglers_delay_is_what_the_timeout_sees() -> None:
    e = stall_trial(5.0, 1.0, detected=True)
    inj = next(x for x in e if x["event"] == "inject")
    inj.update(kind="straggler", delay_s=0.2)  # slow for 5 s, each collective 0.2 s late
    (f,) = figures(e, faults=(("straggler", "1"),))
    assert f.outcome == "false_alarm" and "0.2 s straggler" in f.error


def test_clopper_pearson_upper_bounds() -> None:
    from bench.report.diagnosis import upper_bound

    assert upper_bound(0, 3) == pytest.approx(1 - 0.05 ** (1 / 3), abs=1e-9)  # 0.632
    assert upper_bound(0, 100) == pytest.approx(0.0295, abs=1e-3)  # about the rule of three's 3 %
    assert upper_bound(1, 10) == pytest.approx(0.3942, abs=1e-3)  # tabulated one-sided 95 % bound
    assert upper_bound(2, 2) == 1.0 and math.isnan(upper_bound(0, 0))
