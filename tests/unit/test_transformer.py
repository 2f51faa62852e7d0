"""The transformer workload: determinism from seed and step in any world, the data
position carried with the state, its figures, and validate's refusals."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from bench.procs.events import Event
from bench.rank.comm import StockCollectives
from bench.results.tokens import token_figures
from bench.scenario.config import ConfigError
from bench.scenario.loader import parse
from bench.workloads.transformer import TransformerParams
from bench.workloads.transformer.impl import TransformerWorkload
from bench.workloads.transformer.model import build, tokens

TINY = TransformerParams(layers=1, width=16, heads=2, seq_len=8, vocab=32, batch_per_rank=3)
CPU = torch.device("cpu")


def test_weights_and_stream_come_from_the_seed_alone() -> None:
    a, b, c = build(TINY, 7), build(TINY, 7), build(TINY, 8)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert any(not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters(), strict=True) if pa.dim() > 1)
    s = tokens(TINY, 7, 5, 12)
    assert s.shape == (12, TINY.seq_len + 1) and int(s.min()) >= 0 and int(s.max()) < TINY.vocab
    assert torch.equal(s, tokens(TINY, 7, 5, 12))
    assert not torch.equal(s, tokens(TINY, 7, 6, 12))


def test_tied_head_shares_the_embedding() -> None:
    tied = build(TINY, 0)
    assert tied.head.weight is tied.embed.weight
    untied = build(TransformerParams(layers=1, width=16, heads=2, seq_len=8, vocab=32, tied=False), 0)
    assert untied.head.weight is not untied.embed.weight
    assert sum(p.numel() for p in untied.parameters()) == sum(p.numel() for p in tied.parameters()) + 32 * 16


def _grads(w: TransformerWorkload, batch: int, size: int) -> list[torch.Tensor]:
    """The summed gradient of ``size`` ranks' shares, each scaled as a rank scales it
    (by the global token count: a summing reduction)."""
    total = [torch.zeros_like(p) for p in w.model.parameters()]
    for rank in range(size):
        w.model.zero_grad()
        x, y = w.shard(batch, rank, size)
        logits = w.model(x)
        loss = F.cross_entropy(logits.reshape(-1, TINY.vocab), y.reshape(-1), reduction="sum") / w.tokens_per_step
        loss.backward()
        for t, p in zip(total, w.model.parameters(), strict=True):
            assert p.grad is not None
            t += p.grad
    return total


def test_gradient_is_the_global_mean_whatever_the_world() -> None:
    """4 ranks at launch, 3 after a shrink, 1: the same gradient to float rounding, so a
    recovered run follows the fault-free reference."""
    w = TransformerWorkload(TINY, seed=3, world_size=4, device=CPU)
    four, three, one = (_grads(w, 2, n) for n in (4, 3, 1))
    for a, b, c in zip(four, three, one, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-7)
    assert any(float(g.abs().sum()) > 0 for g in four)


def test_the_data_position_travels_with_the_state(lone_group: StockCollectives) -> None:
    """A workload restored from a state after step 3 reads batch 3 next, and computes the
    step the uninterrupted one computes; a fresh one would read batch 0 again."""
    w = TransformerWorkload(TINY, seed=1, world_size=1, device=CPU)
    w.attach(lone_group)
    reads = [w.step(s)["batch"] for s in (1, 2, 3)]
    assert reads == [0, 1, 2]
    saved = copy.deepcopy(w.state_dict())
    ahead = [w.step(s) for s in (4, 5)]
    other = TransformerWorkload(TINY, seed=1, world_size=1, device=CPU)
    other.load_state_dict(saved)
    other.attach(lone_group)
    again = [other.step(s) for s in (4, 5)]
    assert [f["batch"] for f in again] == [f["batch"] for f in ahead] == [3, 4]
    assert again[0]["tokens"] == 1 * TINY.batch_per_rank * TINY.seq_len
    # step 5's loss depends on step 4's update, so on the restored AdamW moments too
    assert [f["loss_share"] for f in again] == pytest.approx([f["loss_share"] for f in ahead], rel=1e-6)
    assert TransformerWorkload(TINY, seed=1, world_size=1, device=CPU).batch == 0


def _steps(rows: list[tuple[int, int, int]], *, tokens_per_step: int = 100) -> list[Event]:
    """step_end events (step, gen, batch) of two ranks, 0.5 s each."""
    out = []
    t = 0
    for step, gen, batch in rows:
        for rank in (0, 1):
            t += 1
            out.append(
                {"event": "step_end", "t": t, "rank": rank, "step": step, "gen": gen, "batch": batch}
                | {"tokens": tokens_per_step, "step_s": 0.5 if rank else 0.25}
            )
    return out


def test_replayed_steps_are_neither_skipped_nor_repeated() -> None:
    """A restart from a checkpoint at step 2 replays 3 and 4: the lineage reads 0..4 once."""
    rows = [(1, 0, 0), (2, 0, 1), (3, 0, 2), (4, 0, 3), (3, 1, 2), (4, 1, 3), (5, 1, 4)]
    figs = token_figures(_steps(rows), warmup_steps=0)
    assert figs["tokens_skipped"] == 0 and figs["tokens_repeated"] == 0
    assert figs["tokens_per_s"] == pytest.approx(100 / 0.5)  # the slowest rank's step time


def test_a_lost_or_reset_position_is_counted() -> None:
    reset = [(1, 0, 0), (2, 0, 1), (3, 1, 0), (4, 1, 1)]  # weights restored, stream from 0
    assert token_figures(_steps(reset), warmup_steps=0)["tokens_repeated"] == 200
    jumped = [(1, 0, 0), (2, 0, 1), (3, 1, 4), (4, 1, 5)]  # the stream ran on without the steps
    figs = token_figures(_steps(jumped), warmup_steps=0)
    assert figs["tokens_skipped"] == 200 and figs["tokens_repeated"] == 0


def test_workloads_without_a_position_get_no_token_figures() -> None:
    plain: list[Event] = [{"event": "step_end", "t": 1, "rank": 0, "step": 1, "gen": 0, "step_s": 0.1}]
    assert all(math.isnan(v) for v in token_figures(plain, warmup_steps=0).values())


def _scenario(strategy: str, **workload: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "workload": {"kind": "transformer", "world_size": 4, "steps": 20, "pg_timeout_s": 5} | workload,
        "faults": [{"kind": "kill", "target": {"ranks": [1]}, "trigger": {"at_step": 5}}],
        "recovery": {"strategy": strategy},
    }


@pytest.mark.parametrize("strategy", ["failstop", "reinit", "restart", "nvrx-inprocess", "nvrx-launcher"])
def test_ddp_parallelism_runs_under_the_stacks_that_train_any_workload(strategy: str) -> None:
    parse(_scenario(strategy), file="t.toml")


@pytest.mark.parametrize("parallelism", ["fsdp", "hsdp"])
@pytest.mark.parametrize("strategy", ["reinit", "torch-reconfigure", "restart", "nvrx-inprocess"])
def test_sharded_state_is_refused_where_the_stack_cannot_restore_a_shard(parallelism: str, strategy: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(_scenario(strategy, parallelism=parallelism), file="t.toml")
    assert info.value.key == "workload.parallelism" and "t.toml" in str(info.value)
    assert f"'ddp' with strategy {strategy}: " in info.value.expected
    assert "shard" in info.value.expected or "replica groups" in info.value.expected


def test_sharded_state_runs_under_failstop_and_a_dcp_restart() -> None:
    parse(_scenario("failstop", parallelism="hsdp", replicas=2), file="t.toml")
    dcp = _scenario("restart", parallelism="fsdp") | {
        "recovery": {"strategy": "restart", "restart": {"checkpoint": "dcp"}}
    }
    parse(dcp, file="t.toml")


def test_torchft_trains_the_transformer_under_hsdp_only() -> None:
    """Its replica groups heal from a live replica: a sharded one under hsdp (the rest of
    the cases: test_transformer_stacks.py)."""
    with pytest.raises(ConfigError, match=r"workload\.parallelism"):
        parse(_scenario("torchft"), file="t.toml")
    parse(_scenario("torchft", parallelism="hsdp", replicas=2), file="t.toml")


@pytest.mark.parametrize(
    ("knobs", "key"),
    [
        ({"width": 30, "heads": 4}, "workload.width"),
        ({"parallelism": "hsdp", "replicas": 4}, "workload.replicas"),
        ({"parallelism": "hsdp", "replicas": 3}, "workload.replicas"),
    ],
)
def test_shapes_that_cannot_be_built_are_refused(knobs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(_scenario("failstop", **knobs), file="t.toml")
    assert info.value.key == key


def test_faults_inside_collectives_are_refused_under_fsdp() -> None:
    """FSDP2's collectives bypass the rank-side hooks: such a fault would never act."""
    hang = _scenario("failstop", parallelism="fsdp") | {
        "faults": [{"kind": "hang", "duration_s": 2, "target": {"ranks": [1]}, "trigger": {"at_step": 5}}]
    }
    with pytest.raises(ConfigError) as info:
        parse(hang, file="t.toml")
    assert info.value.key == "faults.0.kind"
    hang["workload"]["parallelism"] = "ddp"
    parse(hang, file="t.toml")


def test_the_report_tables_the_data_position_only_where_a_workload_reports_it(tmp_path: Path) -> None:
    from bench.report import datapos
    from bench.report.blocks import Report
    from bench.report.series import build_series
    from bench.results.reader import load as load_run
    from tests.unit.runfactory import trial, write_run

    tokens = {"tokens_per_s": 5000.0, "tokens_skipped": 0.0}
    run = write_run(
        tmp_path,
        "tx",
        {
            "strategy=restart": [
                trial(0.01, 9.0, tokens_repeated=0.0, loss_delta=0.0, **tokens),
                trial(0.01, 9.0, tokens_repeated=512.0, loss_delta=0.01, **tokens),
                trial(0.01, 9.0, tokens_repeated=0.0, loss_delta=0.0, **tokens),
            ],
        },
    )
    (row,) = datapos.table(build_series([load_run(run)])).to_dict("records")
    assert row["tokens/s (fault-free)"] == "5,000 (n=3)"
    assert row["tokens repeated"] == "512 (n=3)", "one trial that lost its place is what the row shows"
    assert row["tokens skipped"] == "0 (n=3)"
    plain = write_run(tmp_path / "plain", "kill", {"strategy=failstop": [trial(0.01)]})
    empty = Report()
    datapos.section(empty, build_series([load_run(plain)]))
    assert empty.blocks == []


@pytest.mark.parametrize("tied", [True, False])
def test_the_memory_estimate_counts_the_model_it_builds(tied: bool) -> None:
    from bench.workloads.transformer import parameters

    p = TransformerParams(layers=3, width=24, heads=2, seq_len=10, vocab=50, tied=tied)
    assert parameters(p)[0] == sum(q.numel() for q in build(p, 0).parameters())


def test_a_transformer_too_big_for_the_machine_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        parse(_scenario("failstop", width=8192, layers=64, vocab=1 << 20), file="t.toml")
    assert info.value.key.startswith("workload.") and "fit this machine" in info.value.expected
    parse(_scenario("failstop"), file="t.toml")
