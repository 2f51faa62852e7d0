"""torch's own in-place recovery (``torch-reconfigure``) for real, in an environment
with torch >= 2.14.

The harness's own torch (2.13.0 on this project's machines) lacks the API, so these run
in a cached ``--env`` environment. Building one costs about 90 s and 5.3 GB (a CUDA build
of torch); the default suite uses one only where it is already cached and says so
otherwise; ``make test-all`` builds it before the tests start.
"""

from __future__ import annotations

import math

import pytest

from bench.procs import venvs
from bench.procs.events import read_events
from tests.integ.conftest import rows

pytestmark = pytest.mark.integ

SPECS = ("torch==2.15.0", "torch==2.14.1")


def native_env() -> str | None:
    """A cached environment whose torch has enable_reconfigure, or None."""
    return next((spec for spec in SPECS if venvs.cached(spec) is not None), None)


NEEDS_ENV = pytest.mark.skipif(
    native_env() is None,
    reason=f"no cached environment of {' or '.join(SPECS)} (torch >= 2.14): `make test-all` builds one "
    "(about 90 s, 5.3 GB), and the default suite then uses it",
)

SCENARIO = """
name = "native"
[workload]
kind = "ddp"
world_size = {world}
steps = {steps}
pg_timeout_s = {timeout}
[[faults]]
kind = "{fault}"
target = {{ ranks = [2] }}
trigger = {{ at_step = 25 }}
{fault_knobs}
[recovery]
strategy = "torch-reconfigure"
[recovery.torch-reconfigure]
notify = "{notify}"
{extra}
[launch]
env = "{env}"
[measure]
trials = 1
deadline_s = 90
reference = {reference}
"""


def scenario(
    *, fault: str = "kill", notify: str = "abandon", timeout: float = 5, reference: bool = False, **kw: str
) -> str:
    return SCENARIO.format(
        fault=fault,
        fault_knobs=kw.get("fault_knobs", ""),
        notify=notify,
        extra=kw.get("extra", ""),
        timeout=timeout,
        env=native_env(),
        reference=str(reference).lower(),
        world=kw.get("world", "3"),
        steps=kw.get("steps", "80"),
    )


@NEEDS_ENV
@pytest.mark.timeout(240)
def test_survivors_reconfigure_in_place_and_train_on(run_scenario) -> None:
    """A SIGKILL, survivors told through the store: torch's _reconfigure re-forms the
    group in the same processes, the phases add up to the downtime, nothing is lost or
    learnt wrong against the fault-free reference."""
    report = run_scenario(scenario(reference=True))
    (r,) = rows(report)
    assert r["outcome"] == "recovered", r
    assert r["torch"].startswith(("2.14", "2.15")), r["torch"]
    phases = {k: v for k, v in r.items() if k.startswith("phase_") and v is not None and not math.isnan(v)}
    assert {"phase_isolate_s", "phase_handles_s", "phase_reconfigure_s"} <= set(phases)
    assert sum(phases.values()) == pytest.approx(r["downtime_s"], rel=1e-6)
    assert r["blame_correct"] == 1 and r["steps_lost"] == 0
    assert abs(r["loss_delta"]) < 1e-4, "the re-formed world computes the same global batch"
    events = read_events(next((report.rundir.path / "events").glob("*/0")))
    worlds = {e["world_size"] for e in events if e["event"] == "reconfigured"}
    assert worlds == {2}, "the survivors' world after the kill"
    assert r["interposer"] == "ftbench-collectives"  # notify = "abandon" waits on ftbench's abortable layer


@NEEDS_ENV
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_without_notice_a_survivor_behind_another_waits_for_its_timeout(run_scenario) -> None:
    """torch as shipped (``notify = "error"``): the dead rank's ring neighbours see the
    reset at once, a survivor blocked on a survivor only at its process-group timeout,
    and the group is re-formed after that (measured: docs/facts.md)."""
    report = run_scenario(scenario(notify="error", timeout=3, world="4"))  # rank 0 is no neighbour of 2
    (r,) = rows(report)
    assert r["outcome"] == "recovered", r
    assert r["ttd_s"] < 1.0
    assert r["ttd_all_s"] >= 3.0, "the last survivor learns at its own timeout, not before"
    assert r["interposer"] == "none"


@NEEDS_ENV
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_replacement_joins_with_its_handle(run_scenario) -> None:
    """``regrow``: a replacement creates its group in the reconfigure regime, publishes
    its handle and joins; the world is back to full strength."""
    # A replacement is a fresh interpreter importing torch (seconds): the job must last that long.
    report = run_scenario(scenario(extra="regrow = true\nregrow_delay_s = 0.2", steps="1500"))
    (r,) = rows(report)
    assert r["outcome"] == "recovered", r
    assert r["ttfs_s"] > 0
    events = read_events(next((report.rundir.path / "events").glob("*/0")))
    assert [e["world_size"] for e in events if e["event"] == "reconfigured" and e["src"] == "rank"][-1] == 3


@NEEDS_ENV
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_stalled_rank_is_left_out_and_leaves(run_scenario) -> None:
    """An 8 s SIGSTOP against a 3 s timeout: the survivors time out together, re-form
    without the stalled rank, which finds itself left out when it wakes and exits."""
    report = run_scenario(scenario(fault="stall", fault_knobs="duration_s = 8", timeout=3))
    (r,) = rows(report)
    assert r["outcome"] == "recovered", r
    assert r["ttd_s"] >= 3.0
    events = read_events(next((report.rundir.path / "events").glob("*/0")))
    assert any(e["event"] == "evicted" for e in events)
