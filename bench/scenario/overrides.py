"""Dotted keys into parsed TOML: sweeps, ``--set`` overrides and point labels.

Overrides and sweep values are written into the raw TOML before validation, so they
are checked exactly like values written in the file, and errors name the same keys.
A sweep may only vary what a point's identity holds (:data:`IDENTITY`): anything else
would make points that differ in name only and share one ``point_hash``.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

from bench.scenario.config import ConfigError, join
from bench.scenario.limits import MAX_POINTS

INDEX = re.compile(r"[0-9]{1,9}")
"""A list index in a dotted key: ASCII digits only (``str.isdigit`` is true for "²")."""
IDENTITY = ("workload", "faults", "recovery", "launch", "measure.seed")
"""The keys a point's identity is made of (:func:`bench.scenario.loader.identity`)."""


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` from the command line; the value is read as TOML, else as a string."""
    key, value = split_setting(text)
    split_key(key, "--set", key)
    return key, toml_value(value)


def split_setting(text: str) -> tuple[str, str]:
    """A command line's ``KEY=VALUE`` (every ``--set``: scenarios, ``scale``, ``project``)."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError("--set", join("", text), "KEY=VALUE")
    return key, value


def toml_value(text: str) -> Any:
    """A command line's value read as TOML, else the text itself: not TOML, too deep for
    the parser, or a newline that would smuggle in more keys ("1\nx = 2")."""
    try:
        doc = tomllib.loads(f"v = {text}")
    except (ValueError, RecursionError):
        return text
    return doc["v"] if doc.keys() == {"v"} else text


def split_key(key: str, file: str, origin: str) -> list[str]:
    """The parts of a dotted key, none empty."""
    parts = key.split(".")
    if not all(parts):
        raise ConfigError(file, origin, "a dotted key without empty parts", key)
    return parts


def flatten_sweep(sweep: Any, file: str, prefix: str = "") -> dict[str, list[Any]]:
    """``[sweep]`` keys may be quoted (``"a.b" = [...]``) or nested tables; both flatten."""
    if not isinstance(sweep, Mapping):
        raise ConfigError(file, join("sweep", prefix) if prefix else "sweep", "a table of KEY = [values]", sweep)
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


def apply_override(raw: dict[str, Any], sweep: dict[str, list[Any]], key: str, value: Any, *, file: str) -> None:
    """``--set KEY=VALUE``: ``sweep.AXIS`` replaces (or adds) that axis of the sweep;
    any other key is written into ``raw`` and replaces the sweep axes at or under it."""
    origin = f"--set {key}"
    parts = split_key(key, file, origin)
    if parts[0] == "sweep":
        axis = ".".join(parts[1:])
        for old in [a for a in sweep if not axis or _under(a, axis)]:
            del sweep[old]
        sweep.update(flatten_sweep({axis: value} if axis else value, file))
        return
    for axis in list(sweep):
        if _under(axis, key):
            del sweep[axis]  # the explicit value replaces that part of the sweep
        elif _under(key, axis):
            raise ConfigError(
                file,
                origin,
                f"a key that sweep.{axis} does not overwrite (override the axis: --set sweep.{axis}=[...])",
            )
    set_path(raw, key, value, file=file, origin=origin)


def _under(key: str, other: str) -> bool:
    """Whether ``key`` is ``other`` or inside it."""
    return key == other or key.startswith(other + ".")


def check_sweep(sweep: Mapping[str, Sequence[Any]], file: str) -> None:
    """What can be refused without expanding: keys outside the point's identity, axes
    inside other axes, more than :data:`MAX_POINTS` points, a value swept twice."""
    for key in sweep:
        split_key(key, file, f"sweep.{key}")
        if not any(_under(key, part) for part in IDENTITY):
            raise ConfigError(
                file,
                f"sweep.{key}",
                "a key of the point's identity (workload, faults, recovery, launch or measure.seed): "
                "sweeping anything else gives points that measure the same thing",
                key,
            )
        for other in sweep:
            if other != key and _under(key, other):
                raise ConfigError(file, f"sweep.{key}", f"a key outside the other swept key sweep.{other}", key)
    count = math.prod(len(values) for values in sweep.values())
    if count > MAX_POINTS:
        raise ConfigError(file, "sweep", f"at most {MAX_POINTS} points (the product of the axes' lengths)", count)
    for key, values in sweep.items():
        seen: set[str] = set()
        for i, value in enumerate(values):
            text = canonical(value)
            if text in seen:
                raise ConfigError(file, f"sweep.{key}.{i}", "a value not already swept (the same point twice)", value)
            seen.add(text)


def canonical(value: Any) -> str:
    """A text that is equal for equal parsed values (for repeats; tables in any key order)."""
    try:
        return json.dumps(value, sort_keys=True, default=repr)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def set_path(raw: dict[str, Any], key: str, value: Any, *, file: str, origin: str, fresh: bool = False) -> None:
    """Write ``value`` at the dotted ``key`` of ``raw``. ``fresh``: copy every table and
    list on the way down first, so that ``raw`` (a shallow copy) shares nothing it
    changes with the tables it was copied from (cheaper than a deep copy per point)."""
    parts = split_key(key, file, origin)
    node: Any = raw
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        here = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            if not INDEX.fullmatch(part) or int(part) >= len(node):
                existing = f"0..{len(node) - 1}" if node else "the list is empty"
                raise ConfigError(file, origin, f"'{here}' to index an existing entry ({existing})", key)
            slot: Any = int(part)
        elif isinstance(node, dict):
            slot = part
            if not last and part not in node:
                node[part] = [] if part == "faults" and depth == 0 else {}
        else:
            raise ConfigError(file, origin, f"'{'.'.join(parts[:depth])}' to be a table", key)
        if last:
            node[slot] = value
        else:
            if fresh and isinstance(node[slot], (dict, list)):
                node[slot] = node[slot].copy()
            node = node[slot]


def label(name: str, values: Sequence[tuple[str, Any]]) -> str:
    """Short readable point label: the last part of each swept key, unless ambiguous."""
    if not values:
        return name
    tails = [k.split(".")[-1] for k, _ in values]
    names = tails if len(set(tails)) == len(tails) else [k for k, _ in values]
    names = [
        "fault" if k.startswith("faults.") and INDEX.fullmatch(k.split(".")[-1]) else n
        for n, (k, _) in zip(names, values, strict=True)
    ]
    return " ".join(f"{n}={_short(v)}" for n, (_, v) in zip(names, values, strict=True))


def _short(value: Any) -> str:
    """A swept table (a whole fault, say) shows as ``kind(knob=value, ...)``; a command
    job's commands (a whole workload, or its ``commands``) by their names, or their
    programs: an argv would make a label of hundreds of characters."""
    commands = value.get("commands") if isinstance(value, Mapping) else value
    if isinstance(commands, list) and commands and all(isinstance(c, Mapping) and "argv" in c for c in commands):
        named = [str(c.get("name") or _program(c["argv"])) for c in commands if not c.get("service")]
        return "+".join(dict.fromkeys(named))
    if isinstance(value, Mapping) and "kind" in value:
        knobs = [f"{k}={v}" for k, v in value.items() if k not in ("kind", "target", "trigger")]
        return str(value["kind"]) + (f"({','.join(knobs)})" if knobs else "")
    return str(value)


def _program(argv: Any) -> str:
    """A command's program and script, short: ``torchrun:train``."""
    words = [str(a) for a in argv] if isinstance(argv, list) else [str(argv)]
    script = next((w.rsplit("/", 1)[-1].removesuffix(".py") for w in words[1:] if w.endswith(".py")), "")
    program = words[0].rsplit("/", 1)[-1] if words else "?"
    return f"{program}:{script}" if script else program
