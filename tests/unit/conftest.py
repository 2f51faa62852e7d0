"""Fixtures shared by the unit tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist

from bench.procs.hygiene import MARKER
from bench.rank.comm import StockCollectives

SLOW_EXEC = ["x"] * 100_000
"""Arguments that hold a child inside ``execve(2)`` for a while (about 4 ms here): the
kernel walks them before it sets up the new environment, which reads as empty until
then. ``Popen`` returns in that window (without them about one time in five here);
with them whatever looks right after meets it every time."""


def start_in_exec(run_id: str) -> subprocess.Popen[bytes]:
    """A child of run ``run_id`` (by its marker) that is still inside its exec when this
    returns, and then sleeps; the caller kills it."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", *SLOW_EXEC], env=os.environ | {MARKER: run_id}
    )


@pytest.fixture
def lone_group(tmp_path: Path) -> Iterator[StockCollectives]:
    """A real one-rank gloo group (a file store: no port), so steps run as in a rank."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield StockCollectives(group_rank=0, group_size=1)
    dist.destroy_process_group()
