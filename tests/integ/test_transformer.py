"""The transformer workload for real: FSDP2 trains on 4 gloo ranks and a kill ends it
(failstop), and a kill of its DDP form is recovered in place (reinit) with the data
position intact and the loss of the fault-free reference."""

from __future__ import annotations

import math

import pytest

from tests.integ.conftest import rows

pytestmark = pytest.mark.integ

TINY = """
name = "tx"
[workload]
kind = "transformer"
world_size = 4
steps = 14
warmup_steps = 2
pg_timeout_s = 5
layers = 1
width = 32
heads = 2
seq_len = 16
vocab = 64
batch_per_rank = 2
parallelism = "{parallelism}"
[[faults]]
kind = "kill"
target = {{ ranks = [2] }}
trigger = {{ at_step = 6 }}
[recovery]
strategy = "{strategy}"
[measure]
trials = 1
deadline_s = 60
reference = true
# Ranks forked from the forkserver: these tests are about the workload's recovery, not
# about how ranks start (fresh interpreters, the default, are tested with every stock
# launcher and by test_calibrate_from_the_cli); eight interpreters importing torch on
# two cores are most of a spawned run.
[launch]
start_method = "forkserver"
"""


@pytest.mark.timeout(120)
def test_fsdp_trains_and_a_kill_is_detected(run_scenario) -> None:
    report = run_scenario(TINY.format(parallelism="fsdp", strategy="failstop"))
    reference = next(r for r in report.rundir.rows() if r["reference"])
    assert reference["outcome"] == "completed", reference
    assert reference["tokens_skipped"] == 0 and reference["tokens_repeated"] == 0
    assert reference["tokens_per_s"] > 0
    (r,) = rows(report)
    assert r["outcome"] == "failed", r
    assert 0 < r["ttd_s"] < 5, "a killed peer is seen from its closed connection, not the 5 s timeout"


@pytest.mark.timeout(120)
def test_reinit_recovers_ddp_from_the_same_data_position(run_scenario) -> None:
    report = run_scenario(TINY.format(parallelism="ddp", strategy="reinit"))
    (r,) = rows(report)
    assert r["outcome"] == "recovered", r
    assert r["tokens_skipped"] == 0 and r["tokens_repeated"] == 0
    assert not math.isnan(r["loss_delta"]) and abs(r["loss_delta"]) < 1e-4


@pytest.mark.timeout(400)
def test_torchft_heals_a_lost_hsdp_replica_group_from_the_live_one(run_scenario) -> None:
    """Rank 2 (group 1, shard 0) dies; its peer is stopped and group 1 comes back whole,
    each rank fetching its shards from the same shard of group 0 over torchft's HTTP
    transport, at the stream position of the reference and on its loss."""
    pytest.importorskip("torchft")
    scenario = TINY.format(parallelism="hsdp", strategy="torchft").replace("steps = 14", "steps = 120")
    scenario = scenario.replace("deadline_s = 60", "deadline_s = 150")  # 8 ranks start, on 2 cores
    report = run_scenario(scenario + "[recovery.torchft]\nrestart_delay_s = 0.5\n")
    (r,) = rows(report)
    assert r["outcome"] == "recovered", r
    assert r["restore_bytes"] > 0 and r["restore_s"] > 0, "the replacement group healed from a live replica"
    assert not math.isnan(r["ttfs_s"]), "the world came back to 4 ranks"
    assert r["tokens_skipped"] == 0 and r["tokens_repeated"] == 0
    assert not math.isnan(r["loss_delta"]) and abs(r["loss_delta"]) < 1e-4
