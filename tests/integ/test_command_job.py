"""A job given as its own command, misbehaving: each ends in a clear error or a
recorded outcome, nothing is left running, and every finished trial is kept.

The jobs are small Python programs (most import no torch, so each trial takes a
second or two); the one that must step imports torch and trains on one process.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.run.runner import RunReport
from tests.integ.conftest import rows

pytestmark = [pytest.mark.integ, pytest.mark.timeout(120)]


@pytest.fixture
def job(tmp_path: Path) -> Callable[..., str]:
    """A scenario running ``code`` (written to a file) as a one-command job of two
    ranks, rank 1 killed after step 3 (``workload``: more ``[workload]`` keys, TOML values)."""

    def scenario(code: str, deadline_s: float = 6, **workload: str) -> str:
        script = tmp_path / "job.py"
        script.write_text(textwrap.dedent(code))
        return _scenario([sys.executable, str(script)], workload, deadline_s)

    return scenario


def _scenario(argv: list[str], workload: dict[str, str], deadline_s: float) -> str:
    argv_toml = json.dumps(argv)
    keys = "".join(f"{k} = {v}\n" for k, v in workload.items())
    return f"""
name = "bad-job"
[workload]
kind = "command"
world_size = 2
steps = 100
{keys}
[[workload.commands]]
argv = {argv_toml}

[[faults]]
kind = "kill"
target = {{ ranks = [1] }}
trigger = {{ at_step = 3 }}

[measure]
trials = 1
deadline_s = {deadline_s}
"""


def test_a_job_that_exits_at_once_is_recorded_with_its_exit(
    run_scenario: Callable[..., RunReport], job: Callable[..., str]
) -> None:
    (row,) = rows(run_scenario(job("raise SystemExit(3)")))
    assert row["outcome"] == "not_injected"
    assert "ended before it showed a step" in row["error"] and "exited 3" in row["error"], row["error"]


def test_a_job_that_never_steps_is_killed_at_its_deadline(
    run_scenario: Callable[..., RunReport], job: Callable[..., str]
) -> None:
    (row,) = rows(run_scenario(job("import time\ntime.sleep(600)")))
    assert row["outcome"] == "hung", row
    assert "never showed a step" in row["error"], row["error"]


def test_a_job_that_ignores_sigterm_is_still_torn_down(
    run_scenario: Callable[..., RunReport], job: Callable[..., str]
) -> None:
    code = """
    import signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
    """
    report = run_scenario(job(code))  # run_scenario asserts nothing of the run is left
    assert rows(report)[0]["outcome"] == "hung"


def test_what_a_job_forks_outside_its_launcher_is_swept_and_named(
    run_scenario: Callable[..., RunReport], job: Callable[..., str]
) -> None:
    code = """
    import subprocess
    subprocess.Popen(["sleep", "300"], start_new_session=True)
    """
    report = run_scenario(job(code))
    events = report.rundir.path / "events"
    (log,) = events.glob("*/0/job.jsonl")
    left = [json.loads(line) for line in log.read_text().splitlines() if '"left_behind"' in line]
    assert left and any("sleep 300" in c for c in left[0]["commands"]), left


def test_a_job_that_floods_its_output_is_not_slowed_and_what_it_printed_is_capped(
    run_scenario: Callable[..., RunReport], job: Callable[..., str]
) -> None:
    code = """
    import sys
    line = "x" * 99 + "\\n"
    for _ in range(400_000):
        sys.stdout.write(line)
    """
    report = run_scenario(job(code, output_limit_mb="1"))
    (row,) = rows(report)
    assert row["outcome"] == "not_injected" and row["trial_wall_s"] < 30, row
    (lines,) = (report.rundir.path / "events").glob("*/0/cmd0.lines")
    assert lines.stat().st_size < 1.2e6
    assert "more lines not kept" in lines.read_text().splitlines()[-1]


TRAINS = """
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 301):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    print(f"iteration {step}", flush=True)
"""


def test_a_rank_the_job_does_not_carry_and_a_regex_that_never_matches_are_said(
    run_scenario: Callable[..., RunReport], job: Callable[..., str]
) -> None:
    """The job trains on one process that says no RANK: the fault on rank 1 finds no
    process and says why; steps come from its optimizer, and the loss it never shows
    (the regex matches nothing) is empty with the reason."""
    regex = "'^never (?P<step>[0-9]+) (?P<loss>[^ ]+)$'"
    (row,) = rows(run_scenario(job(TRAINS, deadline_s=60, progress=regex)))
    assert row["outcome"] == "not_injected", row
    assert "RANK=1" in row["error"], row["error"]
    assert "loss_delta" in row["blind"] and "no progress line" in row["blind"], row["blind"]
