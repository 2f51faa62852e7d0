"""A job given as its own command: what it prints, what the probe recorded, and the
scenario the command line makes, turned into what the figures read."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.scenario.config import ConfigError
from bench.scenario.loader import parse
from bench.strategies.command.progress import parse as parse_progress
from bench.strategies.command.translate import translate
from bench.workloads.command.adhoc import FILE, JobOptions, scenario, world_size


def lines(*texts: str, t0: int = 1_000) -> list[tuple[int, str, str]]:
    return [(t0 + i, "out", text) for i, text in enumerate(texts)]


@pytest.mark.parametrize(
    ("text", "fmt", "step", "loss"),
    [
        ("step 10 loss 0.5", "plain", 10, 0.5),
        ("\x1b[36mstep: 12\x1b[0m  loss:  7.1234  memory: 1GiB", "torchtitan", 12, 7.1234),
        (" iteration       30/     100 | consumed samples: 960 | lm loss: 2.5E+00 |", "megatron", 30, 2.5),
        ("Epoch 1:  50%|█████     | 5/10 [00:01<00:01, 4.0it/s, v_num=0, train_loss=0.25]", "lightning", 15, 0.25),
        ("[rank0]: step 7 loss nan", "auto", 7, math.nan),
    ],
)
def test_progress_formats(text: str, fmt: str, step: int, loss: float | None) -> None:
    (p,) = parse_progress(lines(text), fmt)
    assert p.step == step
    if loss is None:
        assert p.loss is None
    elif math.isnan(loss):
        assert p.loss is not None and math.isnan(p.loss)
    else:
        assert p.loss == pytest.approx(loss)


def test_huggingface_losses_go_with_the_step_its_bar_showed_last() -> None:
    found = parse_progress(
        lines(
            " 10%|█         | 10/100 [00:01<00:09]",
            "{'loss': '1.25', 'grad_norm': '0.5', 'epoch': '0.1'}",  # transformers 5 quotes its values
            "Writing model shards: 100%|██████████| 1/1 [00:00<00:00]",  # another bar: no step
        ),
        "huggingface",
    )
    assert [(p.step, p.loss) for p in found] == [(10, None), (10, 1.25)]


def test_a_step_inside_a_dumped_structure_is_no_progress_line() -> None:
    assert parse_progress(lines("QuorumMember { replica_id: 1, step: 0, world_size: 1 }"), "auto") == []


def test_a_rank_prefix_says_who_printed_and_none_matches_nothing() -> None:
    (p,) = parse_progress(lines("[rank3]: step 4 loss 1"), "plain")
    assert p.rank == 3
    assert parse_progress(lines("step 4 loss 1"), "none") == []


def step(t: int, rank: int, count: int, gen: int = 0, **kw: object) -> dict[str, object]:
    return {"t": t, "event": "step_end", "src": "rank", "rank": rank, "step": count, "count": count, "gen": gen,
            "world_size": 2, "step_s": 0.01, **kw}  # fmt: skip


def test_a_restarted_generation_is_put_on_the_jobs_own_steps_by_its_progress_lines() -> None:
    """Gen 0 ran steps 1-3; gen 1 resumed at step 3 (a checkpoint at 2) and printed
    ``step 3`` after its first step: its counts 1, 2 become steps 3, 4."""
    events = [step(10 * i, r, i) for i in (1, 2, 3) for r in (0, 1)]
    events += [step(100 + 10 * i, r, i, gen=1) for i in (1, 2) for r in (0, 1)]
    progress = parse_progress([(101, "out", "step 3 loss 0.5"), (121, "out", "step 4 loss 0.25")], "plain")
    observed = translate(events, progress, finished=True)
    gen1 = sorted({(e["gen"], e["step"]) for e in observed.events if e["event"] == "step_end" and e["gen"] == 1})
    assert gen1 == [(1, 3), (1, 4)]
    assert observed.steps == 4 and "steps_lost" not in observed.blind
    losses = {e["step"]: e.get("loss_share") for e in observed.events if e["event"] == "step_end" and e["rank"] == 0}
    assert losses[4] == 0.25
    assert [e["rank"] for e in observed.events if e["event"] == "train_end"] == [0, 1]


def test_a_restart_nothing_places_leaves_steps_lost_empty_and_says_why() -> None:
    events = [step(10, 0, 1), step(20, 0, 2), step(100, 0, 1, gen=1)]
    observed = translate(events, [], finished=False)
    assert "steps_lost" in observed.blind and "loss_delta" in observed.blind
    assert [e["step"] for e in observed.events if e["event"] == "step_end"] == [1, 2, 3]


def test_a_collective_failure_is_a_detection_and_anything_else_a_crash() -> None:
    raised = {"t": 5, "event": "raised", "src": "rank", "rank": 1, "pid": 9, "site": "backward", "type": "RuntimeError"}
    events = [
        {**raised, "error": "[pair.cc:537] Read error [127.0.0.1]:1: Connection reset by peer"},
        {**raised, "t": 6, "rank": 0, "type": "ValueError", "error": "bad data"},
    ]
    out = translate(events, [], finished=False).events
    (detect,) = [e for e in out if e["event"] == "detect"]
    (crash,) = [e for e in out if e["event"] == "crash"]
    assert detect["how"] == "peer_reset" and detect["site"] == "backward" and detect["rank"] == 1
    assert crash["rank"] == 0 and "ValueError" in crash["error"]


def test_the_launchers_own_arguments_give_the_world_size() -> None:
    assert world_size(["torchrun", "--nproc-per-node", "4", "train.py"]) == 4
    assert world_size(["torchrun", "--nnodes=2", "--nproc_per_node=3", "t.py"]) == 6
    assert world_size(["ft_launcher", "--nnodes", "1:2", "--nproc-per-node", "2", "t.py"]) == 4
    assert world_size(["accelerate", "launch", "--num_processes", "2", "t.py"]) == 2
    assert world_size(["python3", "-m", "torch.distributed.run", "--nproc-per-node", "3", "t.py"]) == 3
    assert world_size(["python", "train.py"]) is None


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]


def test_the_command_lines_scenario_is_validated_like_a_file(tmp_path: Path) -> None:
    raw = scenario([*TORCHRUN, "train.py"], JobOptions(fault="stall", duration_s=8))
    s = parse(raw, file=FILE)
    assert s.recovery.strategy == "command" and s.workload.world_size == 2
    assert s.faults[0].kind == "stall" and s.name == "job-train"
    with pytest.raises(ConfigError, match="--world-size"):
        scenario(["python", "train.py"], JobOptions())
    with pytest.raises(ConfigError, match=r"argv\.0"):
        parse(scenario(["no-such-program-here"], JobOptions(world_size=2)), file=FILE)


def test_a_command_job_is_its_own_stack() -> None:
    raw = scenario([*TORCHRUN, "t.py"], JobOptions())
    with pytest.raises(ConfigError, match=r"recovery\.strategy"):
        parse(raw | {"recovery": {"strategy": "restart"}}, file=FILE)
    with pytest.raises(ConfigError, match="rank"):
        hang = {"kind": "hang", "duration_s": 8, "target": {"ranks": [1]}, "trigger": {"at_step": 5}}
        parse(raw | {"faults": [hang]}, file=FILE)


def test_run_job_errors_are_one_line() -> None:
    result = CliRunner().invoke(cli, ["run", "--job", "--", "python", "train.py"])
    assert result.exit_code == 2 and "--world-size" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["run", "--job"])
    assert result.exit_code == 2 and "COMMAND" in result.output


def test_a_job_whose_interpreter_lacks_a_module_it_imports_is_skipped_with_the_reason() -> None:
    from bench.strategies.command.job import CommandJob

    raw = scenario([sys.executable, "train.py"], JobOptions(world_size=2))
    raw["workload"]["requires"] = ["json", "no_such_module_of_ftbench"]
    why = CommandJob.unavailable(parse(raw, file=FILE))
    assert why is not None and "no_such_module_of_ftbench" in why and "json" not in why.split("imports")[1]
    raw["workload"]["requires"] = ["json"]
    assert CommandJob.unavailable(parse(raw, file=FILE)) is None
