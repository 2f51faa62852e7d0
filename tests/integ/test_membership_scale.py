"""The membership protocol at the largest size this machine holds: ``ftbench scale``'s
``membership`` coordinator, its members as threads in worker processes against a real
TCPStore, running the code reinit and torch-reconfigure run (``bench.scale.participants.
Member``), which raises when a live member is not in the next world.

At 4,096 members the old protocol's 0.5 s join window closed before every live survivor
had checked in, and a live member was left out (docs/scale.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scale import rundir, spec, sweep
from bench.scale.coordinators import COORDINATORS

pytestmark = pytest.mark.integ

MACHINE_LIMITS = ("descriptors", "ephemeral ports", "thread ids", "threads", "memory")
"""Why a sweep may stop short of its largest size without the protocol failing."""


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_no_live_member_is_left_out_at_the_largest_size_this_machine_runs(tmp_path: Path) -> None:
    sizes = [n for n in spec.FULL_SIZES if n >= 4_096]
    chosen = spec.build(
        ("coordinators=['membership']", f"sizes={sizes}", "repeats=1", f"deadline_s={spec.FULL_DEADLINE_S}")
    )
    run = rundir.load(sweep.run(chosen, tmp_path, progress=print))
    stops = run.stops
    assert all(s.limit in MACHINE_LIMITS for s in stops), stops
    done = run.ok()
    agreed = done[done["op"] == "agree"]
    largest = int(agreed["n"].max())
    assert largest >= 4_096, run.records
    assert agreed[agreed["n"] == largest].iloc[0]["done"] == largest - 1, "every live member had the next world"
    for op in COORDINATORS["membership"].ops:
        assert not done[(done["op"] == op.name) & (done["n"] == largest)].empty, f"{op.name} at {largest}"
