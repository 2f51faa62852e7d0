"""Named scenarios: the TOML files of ``scenarios/`` (or ``$FTBENCH_SCENARIOS``)."""

from __future__ import annotations

import os
from pathlib import Path

from bench.scenario import limits
from bench.scenario.config import ConfigError, one_line


def directory() -> Path:
    env = os.environ.get("FTBENCH_SCENARIOS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "scenarios"


def named() -> dict[str, Path]:
    root = directory()
    return {p.stem: p for p in sorted(root.glob("*.toml"))} if root.is_dir() else {}


def describe() -> list[tuple[str, str]]:
    """(name, one-line description) of every named scenario, for ``ftbench list``; a
    file that cannot be read (or is no regular file: never opened) says so instead."""
    result = []
    for name, path in named().items():
        try:
            text = limits.parse_toml(limits.read_text(path, str(path)), str(path)).get("description", "")
            description = text.splitlines()[0] if isinstance(text, str) and text else ""
        except ConfigError as err:
            description = f"(unreadable: {err})"
        result.append((one_line(name), one_line(description)))
    return result


def resolve(name_or_file: str) -> Path:
    """A scenario file from a name of the catalogue or a path."""
    path = Path(name_or_file)
    try:
        exists = path.exists()
    except (OSError, ValueError) as err:  # a name too long for the file system, say
        raise ConfigError(name_or_file, "", "a scenario file or a named scenario", str(err)) from None
    if path.suffix == ".toml" or exists:
        if not exists:
            raise ConfigError(name_or_file, "", "an existing scenario file")
        return path
    catalogue = named()
    if name_or_file in catalogue:
        return catalogue[name_or_file]
    raise ConfigError(name_or_file, "", f"a scenario file or one of the named scenarios ({', '.join(catalogue)})")
