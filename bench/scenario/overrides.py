"""Dotted keys into parsed TOML: sweeps, ``--set`` overrides and point labels.

Overrides and sweep values are written into the raw TOML before validation, so they
are checked exactly like values written in the file, and errors name the same keys.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

from bench.scenario.config import ConfigError, join


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` from the command line; the value is read as TOML, else as a string."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError("--set", text, "KEY=VALUE")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    return key, parsed


def flatten_sweep(sweep: Any, file: str, prefix: str = "") -> dict[str, list[Any]]:
    """``[sweep]`` keys may be quoted (``"a.b" = [...]``) or nested tables; both flatten."""
    if not isinstance(sweep, Mapping):
        raise ConfigError(file, prefix or "sweep", "a table of KEY = [values]", sweep)
    flat: dict[str, list[Any]] = {}
    for key, value in sweep.items():
        full = join(prefix, key)
        if isinstance(value, Mapping):
            flat.update(flatten_sweep(value, file, full))
        elif isinstance(value, list) and value:
            flat[full] = value
        else:
            raise ConfigError(file, f"sweep.{full}", "a non-empty list of values", value)
    return flat


def set_path(raw: dict[str, Any], key: str, value: Any, *, file: str, origin: str) -> None:
    parts = key.split(".")
    node: Any = raw
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        here = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(file, origin, f"'{here}' to index an existing entry (0..{len(node) - 1})", key)
            index = int(part)
            if last:
                node[index] = value
            else:
                node = node[index]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, [] if part == "faults" else {})
        else:
            raise ConfigError(file, origin, f"'{'.'.join(parts[:depth])}' to be a table", key)


def label(name: str, values: Sequence[tuple[str, Any]]) -> str:
    """Short readable point label: the last part of each swept key, unless ambiguous."""
    if not values:
        return name
    tails = [k.split(".")[-1] for k, _ in values]
    names = tails if len(set(tails)) == len(tails) else [k for k, _ in values]
    names = [
        "fault" if k.startswith("faults.") and k.split(".")[-1].isdigit() else n
        for n, (k, _) in zip(names, values, strict=True)
    ]
    return " ".join(f"{n}={_short(v)}" for n, (_, v) in zip(names, values, strict=True))


def _short(value: Any) -> str:
    """A swept table (a whole fault, say) shows as ``kind(knob=value, ...)``."""
    if isinstance(value, Mapping) and "kind" in value:
        knobs = [f"{k}={v}" for k, v in value.items() if k not in ("kind", "target", "trigger")]
        return str(value["kind"]) + (f"({','.join(knobs)})" if knobs else "")
    return str(value)
