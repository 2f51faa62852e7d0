"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist

from bench.rank.comm import StockCollectives


@pytest.fixture
def lone_group(tmp_path: Path) -> Iterator[StockCollectives]:
    """A real one-rank gloo group (a file store: no port), so steps run as in a rank."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield StockCollectives(group_rank=0, group_size=1)
    dist.destroy_process_group()
