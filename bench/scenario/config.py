"""Typed configuration from plain dicts (parsed TOML), with errors that name the key.

Scenario files are written by hand and edited in CI pipelines, so a typo must never pass
silently: every unknown key, wrong type, out-of-range value and unknown choice becomes a
:class:`ConfigError` that names the file, the dotted key and what was expected. The
dataclasses that describe a configuration stay plain (frozen, keyword-only, slotted);
bounds live in field metadata through :func:`bounded`, so a reader sees the constraint
next to the field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value that is not what was expected.

    ``str(err)`` is the one line the CLI prints: ``FILE: KEY: expected ..., got ...``.
    """

    def __init__(self, file: str, key: str, expected: str, got: Any = dataclasses.MISSING):
        self.file = file
        self.key = key
        self.expected = expected
        self.got = got
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.file}: {self.key}" if self.key else self.file
        got = "" if self.got is dataclasses.MISSING else f", got {_show(self.got)}"
        return f"{where}: expected {self.expected}{got}"


class Unknown:
    """Marker for ``got`` when a key is not known at all."""

    def __repr__(self) -> str:
        return "an unknown key"


UNKNOWN_KEY = Unknown()


def _show(value: Any) -> str:
    if isinstance(value, Unknown):
        return repr(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def bounded(
    default: Any = dataclasses.MISSING,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Any:
    """A dataclass field whose numeric value must lie within the given bounds."""
    meta = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    return dataclasses.field(default=default, metadata=meta)


def join(prefix: str, key: str | int) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def build(cls: type[T], data: Any, *, file: str, prefix: str = "", extra_ok: bool = False) -> T:
    """Build the dataclass ``cls`` from ``data``, checking every key and value.

    With ``extra_ok`` unknown keys are left for the caller (used by tagged unions whose
    kind-specific keys are validated against another class); otherwise they are errors.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(file, prefix, "a table", data)
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    if not extra_ok:
        for key in data:
            if key not in fields:
                raise ConfigError(file, join(prefix, key), f"one of {', '.join(sorted(fields))}", UNKNOWN_KEY)
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        key = join(prefix, name)
        if name in data:
            kwargs[name] = convert(hints[name], data[name], file=file, key=key, meta=f.metadata)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(file, key, "a value (this key is required)")
    return cls(**kwargs)


def convert(tp: Any, value: Any, *, file: str, key: str, meta: Mapping[str, Any] = {}) -> Any:
    """Check ``value`` against the type annotation ``tp`` and return it converted."""
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        errors = []
        for option in options:
            try:
                return convert(option, value, file=file, key=key, meta=meta)
            except ConfigError as err:
                errors.append(err.expected)
        raise ConfigError(file, key, " or ".join(errors), value)
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ConfigError(file, key, "one of " + ", ".join(repr(c) for c in choices), value)
        return value
    if origin is tuple:
        args = get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(file, key, "a list", value)
        item = args[0]
        items = [convert(item, v, file=file, key=join(key, i), meta=meta) for i, v in enumerate(value)]
        if meta.get("nonempty") and not items:
            raise ConfigError(file, key, "a non-empty list", value)
        return tuple(items)
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(file, key, "a table", value)
        _, vtype = get_args(tp)
        return {str(k): convert(vtype, v, file=file, key=join(key, k)) for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build(tp, value, file=file, prefix=key)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(file, key, "true or false", value)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(file, key, "an integer" + _range_text(meta), value)
        _check_range(value, meta, file, key, "an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(file, key, "a number" + _range_text(meta), value)
        _check_range(float(value), meta, file, key, "a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(file, key, "a string", value)
        return value
    if tp is Any:
        return value
    raise TypeError(f"config type {tp!r} of {key} is not supported")  # a bug in a dataclass


def _range_text(meta: Mapping[str, Any]) -> str:
    words = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    parts = [f"{words[k]} {meta[k]}" for k in ("ge", "gt", "le", "lt") if k in meta]
    return (" " + " and ".join(parts)) if parts else ""


def _check_range(value: float, meta: Mapping[str, Any], file: str, key: str, what: str) -> None:
    ok = (
        ("ge" not in meta or value >= meta["ge"])
        and ("gt" not in meta or value > meta["gt"])
        and ("le" not in meta or value <= meta["le"])
        and ("lt" not in meta or value < meta["lt"])
    )
    if not ok:
        raise ConfigError(file, key, what + _range_text(meta), value)


def to_dict(obj: Any, *, drop_defaults: bool = False) -> Any:
    """A dataclass tree as plain JSON-able values (tuples become lists).

    ``drop_defaults`` leaves out fields at their declared default, so that a field added
    in a later version (with a default that keeps the old behaviour) does not change
    what an old scenario hashes to: a run resumed across that change still finds its
    finished trials.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if drop_defaults and _is_default(f, value):
                continue
            out[f.name] = to_dict(value, drop_defaults=drop_defaults)
        return out
    if isinstance(obj, (list, tuple)):
        return [to_dict(v, drop_defaults=drop_defaults) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v, drop_defaults=drop_defaults) for k, v in obj.items()}
    return obj


def _is_default(f: dataclasses.Field[Any], value: Any) -> bool:
    if f.default is not dataclasses.MISSING:
        return bool(value == f.default)
    if f.default_factory is not dataclasses.MISSING:
        return bool(value == f.default_factory())
    return False
