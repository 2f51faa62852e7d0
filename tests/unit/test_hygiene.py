"""Finding a run's processes by their marker, the moment they exist."""

from __future__ import annotations

import pytest

from bench.procs.hygiene import marked
from tests.unit.conftest import start_in_exec


@pytest.mark.timeout(120)
def test_a_process_is_found_the_moment_popen_returns() -> None:
    """A sweep right after a start must see the new process: one inside ``execve(2)``
    reads as having no environment, and a sweep that took that at its word would leave
    it alive."""
    missed = []
    for _ in range(5):
        child = start_in_exec("t-hygiene")
        try:
            if marked().get(child.pid) != "t-hygiene":
                missed.append(child.pid)
        finally:
            child.kill()
            child.wait()
    assert missed == []
