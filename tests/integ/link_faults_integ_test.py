"""Link faults under real training, in real network namespaces (root only).

First principles (FACTS.md): a blackholed peer is noticed only at the process-group
timeout; a TCP reset reaches a direct peer at once; 1% loss costs retransmissions
(slower steps) but breaks nothing, so nobody detects it.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.integ.conftest import rows

pytestmark = [pytest.mark.integ, pytest.mark.root]

BASE = """
name = "link"
[workload]
kind = "ddp"
world_size = 3
steps = {steps}
pg_timeout_s = 5
[[faults]]
{fault}
target = {{ ranks = [1] }}
trigger = {{ at_step = 30 }}
[recovery]
strategy = "reinit"
[measure]
trials = 1
deadline_s = 60
"""


@pytest.fixture(autouse=True)
def namespaces_available() -> None:
    from injectors import netns

    reason = netns.available()
    if reason:
        pytest.skip(f"link faults need network namespaces: {reason}")


def leftovers() -> str:
    found = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    return "\n".join(line for line in found.splitlines() if "ftb" in line)


@pytest.mark.timeout(90)
def test_blackhole_is_detected_at_the_process_group_timeout(run_scenario) -> None:
    (r,) = rows(run_scenario(BASE.format(steps=200, fault='kind = "partition"\nduration_s = 8')))
    assert 5.0 <= r["ttd_s"] < 6.0, r
    assert r["mechanism"].startswith("iptables") or r["mechanism"], r
    assert not leftovers()


@pytest.mark.timeout(90)
def test_tcp_reset_is_detected_by_direct_peers_at_once(run_scenario) -> None:
    (r,) = rows(run_scenario(BASE.format(steps=200, fault='kind = "tcp_reset"\nduration_s = 5')))
    assert r["ttd_s"] < 1.0, r
    assert not leftovers()


@pytest.mark.timeout(90)
def test_one_percent_loss_slows_steps_and_nobody_notices(run_scenario) -> None:
    (r,) = rows(run_scenario(BASE.format(steps=400, fault='kind = "loss"\npercent = 1\nduration_s = 3')))
    assert r["outcome"] == "absorbed", r
    assert r["ttd_s"] is None
    assert r["degraded_step_ratio"] > 1.1, r
    assert not leftovers()
