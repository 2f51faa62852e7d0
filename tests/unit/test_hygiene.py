"""Finding a run's processes by their marker, the moment they exist."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.procs.hygiene import MARKER, marked

SLOW_EXEC = ["x"] * 100_000
"""Arguments that hold a child inside ``execve(2)`` for a while: the kernel walks them
before it sets up the new environment. ``Popen`` returns in that window (without them
about one time in five here); with them a sweep right after meets it every time."""
STARTS = 5


@pytest.mark.timeout(120)
def test_a_process_is_found_the_moment_popen_returns() -> None:
    """A sweep right after a start must see the new process: one inside ``execve(2)``
    reads as having no environment, and a sweep that took that at its word would leave
    it alive."""
    missed = []
    for _ in range(STARTS):
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(30)", *SLOW_EXEC], env=os.environ | {MARKER: "t-hygiene"}
        )
        try:
            if marked().get(child.pid) != "t-hygiene":
                missed.append(child.pid)
        finally:
            child.kill()
            child.wait()
    assert missed == []
