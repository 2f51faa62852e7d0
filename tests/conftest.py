"""Shared fixtures: scenario files written into tmp_path."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def write_scenario(tmp_path: Path) -> Callable[[str, str], Path]:
    def write(text: str, name: str = "s.toml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write
