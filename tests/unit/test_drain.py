"""``drain``: SIGTERM now, SIGKILL to what is left once the grace period is over."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from bench.scenario.config import ConfigError
from bench.scenario.loader import parse
from injectors.base import Target
from injectors.procfs import alive
from injectors.signals import Drain

IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
)


def test_a_target_that_ignores_sigterm_is_killed_when_the_grace_period_ends() -> None:
    proc = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
    drain = Drain(grace_s=5)
    assert drain.duration_s == 5  # the harness calls undo() then
    detail = drain.inject(Target(ranks=[0], pids=[proc.pid]))
    assert detail == {"signal": "SIGTERM", "grace_s": 5, "signalled": [proc.pid]}
    time.sleep(0.2)
    assert alive(proc.pid), "SIGTERM is ignored: the grace period is the process's"
    drain.undo()
    assert proc.wait(timeout=10) == -signal.SIGKILL and drain.killed == [proc.pid]
    drain.undo()  # idempotent


def test_a_target_that_ends_on_sigterm_is_not_killed_again() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    drain = Drain(grace_s=1)
    drain.inject(Target(ranks=[0], pids=[proc.pid]))
    assert proc.wait(timeout=10) == -signal.SIGTERM
    drain.undo()
    assert drain.killed == []


def test_a_grace_period_past_the_deadline_is_refused() -> None:
    raw = {
        "name": "d",
        "workload": {"kind": "ddp", "world_size": 2, "steps": 20},
        "faults": [{"kind": "drain", "grace_s": 90, "target": {"ranks": [1]}, "trigger": {"at_step": 5}}],
        "measure": {"deadline_s": 60},
    }
    with pytest.raises(ConfigError, match=r"faults\.0\.grace_s: expected a fault that is over before"):
        parse(raw, file="d.toml")
