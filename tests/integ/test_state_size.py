"""A sized state for real: with ``state_mb`` the ddp workload's checkpoint writes, and a
restart loads, about that many bytes per rank, and a recovered world still learns what
the fault-free reference learns (the wide branch is deterministic from seed and step)."""

from __future__ import annotations

import pytest

from tests.integ.conftest import rows

pytestmark = pytest.mark.integ

SCENARIO = """
name = "sized"
[workload]
kind = "ddp"
backend = "gloo"
world_size = 2
steps = 30
pg_timeout_s = 10
state_mb = 20
[[faults]]
kind = "kill"
target = { ranks = [1] }
trigger = { at_step = 15 }
[recovery]
strategy = "restart"
[recovery.restart]
checkpoint_every = 10
[measure]
trials = 1
deadline_s = 100
reference = true
"""


@pytest.mark.timeout(150)
def test_restart_moves_the_sized_state_and_follows_the_reference(run_scenario) -> None:
    (r,) = rows(run_scenario(SCENARIO))
    assert r["outcome"] == "recovered", r
    assert abs(r["loss_delta"]) < 1e-4, "a restored world learns what the fault-free reference learns"
    # torch.save of parameters and momentum: 20 MB and the pickle's few kB around them.
    assert 20e6 <= r["restore_bytes"] < 20.5e6 and 20e6 <= r["checkpoint_bytes"] < 20.5e6
    assert r["restore_s"] > 0 and r["checkpoint_blocked_s"] > 0
