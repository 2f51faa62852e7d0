"""The ``torchft`` strategy's figures and phases from hand-written event logs, and the
harness-side decisions that need no processes (version rule, lighthouse log lines, the
workload check).

The event sequences follow what :mod:`bench.ft_replica` and the lighthouse process emit
in a real trial (see tests/integ/torchft_integ_test.py for the real thing): the gen of a
step is TorchFT's quorum id, a survivor's failed iteration is a ``discard``, and the
replacement heals (``restore_*``) in a quorum where it does not yet participate.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.results.derive import fault_figures
from bench.results.facts import trial_facts
from bench.scenario.config import ConfigError
from bench.scenario.loader import parse
from bench.scenario.strategy import STRATEGIES
from bench.strategies.torchft.lighthouse import parse_quorum_line
from bench.strategies.torchft.version import ddp_workaround_needed

MS = 1_000_000
STEPS = 60
SHARE = 0.1  # loss_share of each of 3 participants: global loss 0.3


def ev(t_ms: float, event: str, **fields: Any) -> dict[str, Any]:
    return {"t": round(t_ms * MS), "event": event, **fields}


def step_ends(
    members: dict[int, bool],
    first: int,
    last: int,
    t0_ms: float,
    gen: int,
    *,
    every_ms: float = 10.0,
    pids: dict[int, int] | None = None,
) -> list[dict[str, Any]]:
    """``members``: replica -> participating. A healing replica reports loss_share 0."""
    n = sum(members.values())
    out = []
    for i, step in enumerate(range(first, last + 1)):
        for r, participating in members.items():
            out.append(
                ev(
                    t0_ms + i * every_ms + 0.1 * r,
                    "step_end",
                    src="rank",
                    rank=r,
                    pid=(pids or {}).get(r, 100 + r),
                    step=step,
                    gen=gen,
                    step_s=every_ms / 1000,
                    world_size=n,
                    loss_share=SHARE * 3 / n if participating else 0.0,
                    participating=participating,
                )
            )
    return out


def kill_trial(*, survivors_saw_error: bool = True) -> list[dict[str, Any]]:
    """3 replica groups, replica 2 killed after step 20 (join_timeout_ms=100): survivors
    discard step 21, the lighthouse issues quorum 2 at 150 ms, they commit step 21 at
    190 ms; the replacement (pid 302) heals in quorum 3 and participates from step 41."""
    all3 = {0: True, 1: True, 2: True}
    e = [
        ev(
            0,
            "quorum",
            src="lighthouse",
            pid=9,
            gen=1,
            participants=["replica_0", "replica_1", "replica_2"],
            world_size=3,
        )
    ]
    e += [ev(1 + r, "reconfigured", src="rank", rank=r, pid=100 + r, gen=1, world_size=3) for r in range(3)]
    e += step_ends(all3, 1, 20, t0_ms=10, gen=1)  # last pre-fault step ends at 200.2 ms
    t = 201.0  # the kill
    e += [ev(t, "inject", src="harness", fault=0, kind="kill", ranks=[2], pids=[102])]
    e += [ev(t + 20, "detect", src="agent", how="exit", of_rank=2, exitcode=-9)]
    if survivors_saw_error:
        e += [
            ev(t + 25 + r, "detect", src="rank", rank=r, pid=100 + r, how="peer_closed", gen=1, step=21) for r in (0, 1)
        ]
        e += [ev(t + 26 + r, "discard", src="rank", rank=r, pid=100 + r, gen=1, step=21) for r in (0, 1)]
    e += [ev(t + 150, "quorum", src="lighthouse", pid=9, gen=2, participants=["replica_0", "replica_1"], world_size=2)]
    e += [ev(t + 170 + r, "reconfigured", src="rank", rank=r, pid=100 + r, gen=2, world_size=2) for r in (0, 1)]
    e += step_ends({0: True, 1: True}, 21, 39, t0_ms=t + 190, gen=2)  # step 39 ends at t + 370
    t_heal = t + 1200.0
    e += [ev(t_heal - 300, "restart", src="agent", of_rank=2, incarnation=1)]
    e += [
        ev(
            t_heal,
            "quorum",
            src="lighthouse",
            pid=9,
            gen=3,
            participants=["replica_0", "replica_1", "replica_2"],
            world_size=3,
        )
    ]
    e += [ev(t_heal + 5, "restore_start", src="rank", rank=2, pid=302, how="peer", source=0)]
    e += [ev(t_heal + 35, "restore_end", src="rank", rank=2, pid=302, how="peer", source=0, bytes=135176)]
    e += [
        ev(t_heal + 40 + r, "reconfigured", src="rank", rank=r, pid=100 + r if r < 2 else 302, gen=3, world_size=2)
        for r in range(3)
    ]
    e += step_ends({0: True, 1: True, 2: False}, 40, 40, t0_ms=t_heal + 50, gen=3, pids={2: 302})
    e += step_ends(all3, 41, STEPS, t0_ms=t_heal + 60, gen=3, pids={2: 302})
    e += [
        ev(t_heal + 300, "train_end", src="rank", rank=r, pid=100 + r if r < 2 else 302, step=STEPS, gen=3)
        for r in range(3)
    ]
    return sorted(e, key=lambda x: x["t"])


def figures(events: list[dict[str, Any]], **kw: Any):
    (f,) = fault_figures(
        events, faults=[("kill", "2")], steps=STEPS, warmup_steps=0, phases=STRATEGIES["torchft"].phases, **kw
    )
    return f


def test_kill_with_fast_join_has_known_figures_and_phases() -> None:
    f = figures(kill_trial())
    assert f.outcome == "recovered", f.error
    fig, ph = f.figures, f.phases
    assert fig["ttd_s"] == pytest.approx(0.020)  # the agent reaped the killed replica
    assert fig["ttd_all_s"] == pytest.approx(0.026)  # both survivors saw the gloo error
    # Survivors' first commit without the victim: step 21 of quorum 2, ended by replica 1 at t + 190.1.
    assert fig["ttr_s"] == pytest.approx(0.1901 - 0.020)
    assert ph["phase_detect_s"] == pytest.approx(0.020)
    assert ph["phase_lighthouse_s"] == pytest.approx(0.150 - 0.020)  # the join timeout, mostly
    assert ph["phase_reconfigure_s"] == pytest.approx(0.171 - 0.150)  # both survivors have quorum 2
    assert ph["phase_catchup_s"] == pytest.approx(0.1901 - 0.171)
    assert sum(v for k, v in ph.items()) == pytest.approx(fig["downtime_s"])
    assert fig["steps_discarded"] == 1
    assert fig["steps_lost"] == 0
    # Full strength: the first step where all three participate (step 41 of quorum 3).
    assert fig["ttfs_s"] == pytest.approx(1.260 + 0.0002)
    assert fig["restore_s"] == pytest.approx(0.030)
    assert fig["restore_bytes"] == 135176


def reference_trial() -> list[dict[str, Any]]:
    """The fault-free torchft run of the same point: three participants all along."""
    e = step_ends({0: True, 1: True, 2: True}, 1, STEPS, t0_ms=10, gen=1)
    return e + [ev(10 * STEPS + 20, "train_end", src="rank", rank=r, pid=100 + r, step=STEPS, gen=1) for r in range(3)]


def test_shares_of_a_step_sum_to_the_global_loss_for_loss_delta() -> None:
    """A healing replica's share is 0 and the others' scale up: every step sums to 0.3, so
    a recovered run compares with the fault-free reference on the same footing."""
    reference = trial_facts(reference_trial(), steps=STEPS, warmup_steps=0)
    assert reference.final_loss == pytest.approx(0.3)
    f = figures(kill_trial(), reference=reference)
    assert f.figures["loss_delta"] == pytest.approx(0.0, abs=1e-12)
    assert not math.isnan(f.figures["goodput"]) and f.figures["goodput"] > 0


def test_kill_between_steps_is_detected_by_the_agent_only() -> None:
    """A replica killed while the survivors wait for the next quorum costs them no
    error: they just get the next quorum late. The trial still recovers; only
    ``ttd_all_s`` (every survivor detected) does not exist."""
    f = figures(kill_trial(survivors_saw_error=False))
    assert f.outcome == "recovered"
    assert math.isnan(f.figures["ttd_all_s"])
    assert f.figures["steps_discarded"] == 0
    assert f.figures["ttr_s"] == pytest.approx(0.1701, abs=0.0201)


def test_survivors_that_never_commit_again_fail() -> None:
    events = [e for e in kill_trial() if not (e["event"] in ("step_end", "train_end") and e["t"] > 201 * MS)]
    f = figures(events)
    assert f.outcome == "failed"
    assert math.isnan(f.figures["ttr_s"]) and math.isnan(f.figures["ttfs_s"])


LINE = (
    "2026-12-02T13:13:42.409 [INFO] [torchft::lighthouse] - Quorum! Quorum { quorum_id: 7, participants: "
    '[QuorumMember { replica_id: "replica_0:6377c73d-7e28", address: "http://vm:44483", store_address: '
    '"127.0.0.1:42865", step: 0, world_size: 1, shrink_only: false, commit_failures: 0, data: "" }, '
    'QuorumMember { replica_id: "replica_2:5068e581-5e1b", address: "http://vm:36517", step: 0, '
    "world_size: 1, shrink_only: false }], created: Some(Timestamp { seconds: 1796217222, nanos: 4 }) }"
)


def test_lighthouse_quorum_line_is_parsed() -> None:
    assert parse_quorum_line(LINE) == {"gen": 7, "participants": ["replica_0", "replica_2"], "world_size": 2}
    assert (
        parse_quorum_line(
            "2026-12-02T13:13:42.409 [INFO] [torchft::lighthouse] - Detected quorum change, bumping quorum_id to 1"
        )
        is None
    )
    assert parse_quorum_line("Quorum status: Valid quorum found [3/3 participants healthy]") is None


@pytest.mark.parametrize(
    ("version", "mode", "expected"),
    [
        (("torchft", "0.2.0"), "auto", True),
        (("torchft", "0.1.1"), "auto", True),
        (("torchft", "0.3.0"), "auto", False),
        (("torchft-nightly", "2026.10.26"), "auto", False),
        (("torchft-nightly", "2026.9.30"), "auto", True),
        (("unknown", "unknown"), "auto", True),
        (("torchft-nightly", "2026.10.26"), "on", True),
        (("torchft", "0.2.0"), "off", False),
    ],
)
def test_ddp_workaround_follows_the_version(version: tuple[str, str], mode: str, expected: bool) -> None:
    assert ddp_workaround_needed(version, mode) is expected


def test_allreduce_workload_and_rank_side_faults_are_refused_naming_the_key() -> None:
    raw = {
        "name": "x",
        "workload": {"kind": "allreduce", "world_size": 3, "steps": 10},
        "recovery": {"strategy": "torchft"},
    }
    with pytest.raises(ConfigError, match=r"x\.toml: workload\.kind: expected 'ddp'.*got 'allreduce'"):
        parse(raw, file="x.toml")
    raw = {
        "name": "x",
        "workload": {"world_size": 3, "steps": 10},
        "recovery": {"strategy": "torchft"},
        "faults": [{"kind": "hang", "duration_s": 1, "target": {"ranks": [1]}, "trigger": {"at_step": 5}}],
    }
    with pytest.raises(ConfigError, match=r"faults\.0\.kind: expected a fault that acts from outside"):
        parse(raw, file="x.toml")
