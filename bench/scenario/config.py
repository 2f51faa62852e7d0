"""Typed configuration from plain dicts (parsed TOML), with errors that name the key.

Scenario files are written by hand and edited in CI pipelines, so a typo must never pass
silently: every unknown key, wrong type, out-of-range value and unknown choice becomes a
:class:`ConfigError` that names the file, the dotted key and what was expected. The
dataclasses that describe a configuration stay plain (frozen, keyword-only, slotted);
bounds live in field metadata through :func:`bounded`, so a reader sees the constraint
next to the field.

Numbers are checked beyond their declared bounds, because a scenario is fed to clocks,
random generators and C libraries that do not forgive: ``inf`` and ``nan`` are refused
everywhere, integers must fit 64 bits (:data:`INT_MIN`, :data:`INT_MAX`), and a
non-integer number whose field declares no upper bound of its own is at most
:data:`MAX_MAGNITUDE` in magnitude. Strings may not hold control characters (a label
with an ANSI escape or a NUL would reach terminals and file names), and lists hold at
most :data:`MAX_ITEMS` entries unless the field says fewer.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import reprlib
import types
import typing
import unicodedata
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

T = TypeVar("T")

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
"""Integers are 64-bit signed, as TOML says and as torch, the kernel and torchft take them."""
MAX_MAGNITUDE = 1e9
"""A float field that declares no upper bound is at most this in magnitude: 1e9 s is
31 years (``time.sleep`` and ``timedelta`` overflow not far beyond), and no rate, ratio
or size knob of a scenario means anything past it."""
MAX_ITEMS = 1024
"""Entries of one list at most, unless its field declares fewer (``max_items``)."""


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
        got = "" if self.got is dataclasses.MISSING else f", got {show(self.got)}"
        return one_line(f"{where}: expected {self.expected}{got}")


def one_line(text: str) -> str:
    """``text`` with every character that is not printable escaped (``\\n``, ``\\x1b``,
    ``\\u2028``): a file name or key may hold anything, the error stays one plain line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class Unknown:
    """Marker for ``got`` when a key is not known at all."""

    def __repr__(self) -> str:
        return "an unknown key"


UNKNOWN_KEY = Unknown()


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 60, 60, 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6


def show(value: Any) -> str:
    """A bounded ``repr`` for messages: the value may be huge or deeply nested."""
    if isinstance(value, Unknown):
        return repr(value)
    try:
        text = _REPR.repr(value)
    except (RecursionError, ValueError):  # a pathological object; say what it is
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def bounded(
    default: Any = dataclasses.MISSING,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    max_items: int | None = None,
) -> Any:
    """A dataclass field whose numeric value must lie within the given bounds (or, for a
    list, that holds at most ``max_items`` entries)."""
    given = (("ge", ge), ("gt", gt), ("le", le), ("lt", lt), ("max_items", max_items))
    meta = {k: v for k, v in given if v is not None}
    return dataclasses.field(default=default, metadata=meta)


def join(prefix: str, key: str | int) -> str:
    """A dotted key; an empty part shows as ``""`` so that the error still names it."""
    part = '""' if key == "" else str(key)
    return f"{prefix}.{part}" if prefix else part


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """Resolved annotations of a config dataclass (resolving them was most of the cost
    of a validation, and a sweep validates every point)."""
    return get_type_hints(cls)


@functools.cache
def _fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls) if f.init}


def build(cls: type[T], data: Any, *, file: str, prefix: str = "", extra_ok: bool = False) -> T:
    """Build the dataclass ``cls`` from ``data``, checking every key and value.

    With ``extra_ok`` unknown keys are left for the caller (used by tagged unions whose
    kind-specific keys are validated against another class); otherwise they are errors.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(file, prefix, "a table", data)
    klass: type = cls  # hashable, for the caches
    hints, fields = _hints(klass), _fields(klass)
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
        if value is None and len(options) < len(get_args(tp)):
            return None  # "unset" (JSON's null; TOML has none, so scenario files cannot say it)
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
        limit = meta.get("max_items", MAX_ITEMS)
        if len(value) > limit:
            raise ConfigError(file, key, f"a list of at most {limit} entries", f"{len(value)} entries")
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
    if tp is int or tp is float:
        return _number(tp, value, meta, file, key)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(file, key, "a string", value)
        if any(unicodedata.category(c) == "Cc" for c in value):
            raise ConfigError(file, key, "a string without control characters", value)
        return value
    if tp is Any:
        return value
    raise TypeError(f"config type {tp!r} of {key} is not supported")  # a bug in a dataclass


def _number(tp: type, value: Any, meta: Mapping[str, Any], file: str, key: str) -> Any:
    """An integer (``tp`` int) or a number (``tp`` float): finite, 64-bit, within bounds."""
    what = "an integer" if tp is int else "a number"
    accepted = (int,) if tp is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, accepted):
        raise ConfigError(file, key, what + _range_text(meta), value)
    if isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
        raise ConfigError(file, key, f"{what} that fits 64 bits", value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(file, key, f"a finite number{_range_text(meta)}", value)
    _check_range(value, meta, file, key, what)
    if tp is float and not ("le" in meta or "lt" in meta) and abs(value) > MAX_MAGNITUDE:
        raise ConfigError(file, key, f"a number of magnitude at most {MAX_MAGNITUDE:g}", value)
    return float(value) if tp is float else value


def _range_text(meta: Mapping[str, Any]) -> str:
    words = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}  # max_items is a list's, not shown
    parts = [f"{words[k]} {_num(meta[k])}" for k in ("ge", "gt", "le", "lt") if k in meta]
    return (" " + " and ".join(parts)) if parts else ""


def _num(bound: float) -> str:
    """A bound as written: 256, 0.5, 1e+15 (not 1000000000000000.0)."""
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


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
