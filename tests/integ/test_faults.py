"""The fault families of docs/design.md as checks: real ranks, real hooks, real signals."""

from __future__ import annotations

import pytest

from tests.integ.conftest import at_timeout, rows

pytestmark = pytest.mark.integ

BASE = """
name = "f"
[workload]
kind = "ddp"
world_size = {world}
steps = {steps}
pg_timeout_s = 5
checksum_every = {checksum_every}
[launch]
ranks_per_host = {rph}
{faults}
[recovery]
strategy = "reinit"
[measure]
trials = 1
deadline_s = 60
reference = {reference}
"""


def text(
    faults: str, *, world: int = 3, steps: int = 150, checksum_every: int = 0, rph: int = 1, reference: str = "false"
) -> str:
    return BASE.format(
        faults=faults, world=world, steps=steps, checksum_every=checksum_every, rph=rph, reference=reference
    )


@pytest.mark.timeout(90)
def test_straggler_slows_steps_and_nobody_notices(run_scenario) -> None:
    (r,) = rows(
        run_scenario(
            text("""
[[faults]]
kind = "straggler"
delay_s = 0.03
duration_s = 1.5
target = { ranks = [1] }
trigger = { at_step = 30 }
""")
        )
    )
    assert r["outcome"] == "absorbed", r
    assert r["ttd_s"] is None
    # every collective of the straggler starts 30 ms late: no step can be faster than that
    assert r["degraded_step_ratio"] * r["ff_step_s"] >= 0.03


@pytest.mark.timeout(120)
def test_bit_flip_is_silent_without_the_detector_and_found_with_it(run_scenario) -> None:
    flip = """
[[faults]]
kind = "bitflip"
bit = 27
target = { ranks = [2] }
trigger = { at_step = 30 }
"""
    (silent,) = rows(run_scenario(text(flip)))
    assert silent["outcome"] == "corrupted", silent
    assert "diverged" in silent["error"]
    (found,) = rows(run_scenario(text(flip, checksum_every=10, reference="true")))
    assert found["outcome"] == "recovered", found
    assert found["ttd_s"] < 5.0  # the next check, at most 10 steps later
    assert found["restore_bytes"] > 0  # repaired from a majority replica
    assert abs(found["loss_delta"]) < 1e-4


@pytest.mark.timeout(90)
def test_raise_in_a_collective_is_detected_at_once(run_scenario) -> None:
    (r,) = rows(
        run_scenario(
            text("""
[[faults]]
kind = "raise"
target = { ranks = [0] }
trigger = { at_step = 30 }
""")
        )
    )
    assert r["outcome"] == "recovered", r
    assert r["ttd_all_s"] < 1.0


@pytest.mark.timeout(90)
def test_hang_in_a_collective_is_detected_at_the_timeout(run_scenario) -> None:
    (r,) = rows(
        run_scenario(
            text("""
[[faults]]
kind = "hang"
duration_s = 8
target = { ranks = [1] }
trigger = { at_step = 30 }
""")
        )
    )
    assert at_timeout(r["ttd_s"], 5.0), r
    assert r["outcome"] == "recovered"


@pytest.mark.timeout(90)
def test_node_loss_takes_every_rank_of_the_host(run_scenario) -> None:
    (r,) = rows(
        run_scenario(
            text(
                """
[[faults]]
kind = "kill"
target = { host = 1 }
trigger = { at_step = 30 }
""",
                world=4,
                rph=2,
            )
        )
    )
    assert r["outcome"] == "recovered", r
    assert r["target"] == "2,3"
    assert r["ttd_all_s"] < 1.0


@pytest.mark.timeout(90)
def test_a_dead_store_is_noticed_only_when_recovery_needs_it(run_scenario) -> None:
    store, rank = rows(
        run_scenario(
            text("""
[[faults]]
kind = "kill"
target = { component = "store" }
trigger = { at_step = 30 }
[[faults]]
kind = "kill"
target = { ranks = [2] }
trigger = { at_step = 90 }
""")
        )
    )
    assert store["target"] == "store" and store["outcome"] == "absorbed", store
    assert rank["outcome"] == "failed" and rank["ttd_s"] < 1.0, rank
