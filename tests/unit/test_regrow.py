"""A regrowing job replaces every rank that died, so that a long chaos run keeps growing
back to full strength; a rank the survivors left out (it saw the failure after the
agreement closed) rejoins in its own process, and one that left cleanly (the job is
over for it) needs no replacement."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from bench.jobs.supervisor import RegrowingJob
from bench.procs.events import EventWriter
from bench.procs.launcher import RankProcess
from bench.rank.entry import EXIT_LEFT, EXIT_OK


def job(tmp_path: Path, *, regrow: bool = True) -> RegrowingJob:
    params = SimpleNamespace(regrow=regrow, regrow_delay_s=2.0)
    scenario = SimpleNamespace(recovery=SimpleNamespace(strategy="reinit", params=params))
    j = RegrowingJob(SimpleNamespace(scenario=scenario))  # type: ignore[arg-type]
    j.supervisor = EventWriter(tmp_path / "supervisor.jsonl", src="supervisor")
    live = [RankProcess(rank=0, process=None)]
    j.launcher = SimpleNamespace(running=lambda: live, store_process=None)  # type: ignore[assignment]
    j.replacements, j.finished_at = {}, None
    return j


def test_a_killed_rank_is_replaced_and_one_that_left_is_not(tmp_path: Path) -> None:
    j = job(tmp_path)
    j.on_exit(RankProcess(rank=3, process=None, exitcode=-9))
    j.on_exit(RankProcess(rank=1, process=None, exitcode=EXIT_LEFT))
    assert set(j.replacements) == {3}
    assert all(due > time.monotonic() + 1 for due in j.replacements.values()), "after regrow_delay_s"


def test_nothing_is_replaced_without_regrow_or_once_training_finished(tmp_path: Path) -> None:
    j = job(tmp_path, regrow=False)
    j.on_exit(RankProcess(rank=1, process=None, exitcode=EXIT_LEFT))
    assert j.replacements == {}
    j = job(tmp_path)
    j.on_exit(RankProcess(rank=0, process=None, exitcode=EXIT_OK))
    j.on_exit(RankProcess(rank=1, process=None, exitcode=EXIT_LEFT))
    assert j.replacements == {}
