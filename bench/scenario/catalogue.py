"""Named scenarios: the TOML files of ``scenarios/`` (or ``$FTBENCH_SCENARIOS``)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from bench.scenario.config import ConfigError


def directory() -> Path:
    env = os.environ.get("FTBENCH_SCENARIOS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "scenarios"


def named() -> dict[str, Path]:
    root = directory()
    return {p.stem: p for p in sorted(root.glob("*.toml"))} if root.is_dir() else {}


def describe() -> list[tuple[str, str]]:
    """(name, one-line description) of every named scenario, for ``ftbench list``."""
    result = []
    for name, path in named().items():
        try:
            description = str(tomllib.loads(path.read_text()).get("description", ""))
        except (OSError, tomllib.TOMLDecodeError) as err:
            description = f"(unreadable: {err})"
        result.append((name, description.splitlines()[0] if description else ""))
    return result


def resolve(name_or_file: str) -> Path:
    """A scenario file from a name of the catalogue or a path."""
    path = Path(name_or_file)
    if path.suffix == ".toml" or path.exists():
        if not path.exists():
            raise ConfigError(name_or_file, "", "an existing scenario file")
        return path
    catalogue = named()
    if name_or_file in catalogue:
        return catalogue[name_or_file]
    raise ConfigError(name_or_file, "", f"a scenario file or one of the named scenarios ({', '.join(catalogue)})")
