"""Hostile scenario input for tests/unit/test_hostile_input.py: valid base scenarios,
a TOML writer that can express anything TOML can (inf, nan, huge integers, control
characters in strings and keys, dates), and hypothesis strategies that break a base
in the ways files written by hand, by templates and by fuzzers break.

Every strategy starts from a scenario that validates, so most mutations land one
step away from valid: the interesting place, where a check is missing or a value
slips through to a traceback.
"""

from __future__ import annotations

import copy
import datetime
import math
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

BASES: tuple[dict[str, Any], ...] = (
    {
        "name": "hostile-reinit",
        "description": "stall under reinit,\n\twith a sweep",
        "workload": {"kind": "ddp", "world_size": 4, "steps": 100, "pg_timeout_s": 5, "hidden": 32},
        "faults": [{"kind": "stall", "duration_s": 8, "target": {"ranks": [1]}, "trigger": {"at_step": 20}}],
        "recovery": {"strategy": "reinit", "reinit": {"join_window_s": 0.25}},
        "measure": {"trials": 3, "seed": 1, "deadline_s": 60},
        "launch": {"ranks_per_host": 2},
        "sweep": {"faults.0.duration_s": [8, 3], "recovery.strategy": ["failstop", "reinit"]},
        "gate": {"metric": "ttr_s", "slo": [{"metric": "ttd_s", "stat": "max", "max": 6.0}]},
    },
    {
        "name": "hostile-torchft",
        "workload": {"world_size": 3, "steps": 50, "pg_timeout_s": 10},
        "faults": [{"kind": "kill", "target": {"component": "lighthouse"}, "trigger": {"after_s": 5}}],
        "recovery": {"strategy": "torchft", "torchft": {"min_replicas": 2, "heartbeat_timeout_ms": 2000}},
        "measure": {"deadline_s": 90},
        "sweep": {"workload.world_size": [3, 2]},
    },
    {
        "name": "hostile-multi",
        "workload": {"kind": "allreduce", "world_size": 4, "steps": 300, "size_bytes": 4096},
        "faults": [
            {"kind": "hang", "duration_s": 2, "target": {"one": True}, "trigger": {"every_s": 5, "count": 2}},
            {"kind": "delay", "delay_ms": 5, "duration_s": 3, "target": {"host": 1}, "trigger": {"mtbf_s": 10}},
            {"kind": "bitflip", "target": {"fraction": 0.5}, "trigger": {"probability": 0.1, "count": 2}},
        ],
        "launch": {"ranks_per_host": 2, "network": "namespaces"},
        "recovery": {"strategy": "failstop"},
        "measure": {"deadline_s": 120, "seed": 7},
        "sweep": {
            "faults.1": [
                {"kind": "delay", "delay_ms": 5, "duration_s": 3, "target": {"host": 1}, "trigger": {"mtbf_s": 10}},
                {"kind": "loss", "percent": 1, "duration_s": 3, "target": {"host": 0}, "trigger": {"after_s": 1}},
            ]
        },
    },
)

# --- TOML out ----------------------------------------------------------------------------


def toml(doc: dict[str, Any]) -> str:
    """``doc`` as TOML, one ``key = inline value`` line per top-level key."""
    return "".join(f"{_key(k)} = {_value(v)}\n" for k, v in doc.items())


def _key(key: Any) -> str:
    return _string(str(key))


def _string(text: str) -> str:
    """A TOML basic string: printable ASCII as is, everything else escaped (lone
    surrogates too, which TOML then refuses: a syntax error is a fine outcome)."""
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif " " <= c <= "~":
            out.append(c)
        else:
            out.append(f"\\U{ord(c):08X}")
    return '"' + "".join(out) + '"'


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }" if v else "{}"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(type(v))


# --- values ------------------------------------------------------------------------------

NUMBERS = (0, -1, 1, 2, 3, 7, 31, 32, 33, 256, 257, 3600, 10**4, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**400)
FLOATS = (0.0, -0.0, 0.5, 1.0, 59.9, 60.0, 3600.0, 86400.0, 86400.5, 1e9, 1e10, 1e15, 1e308, -1e308, 5e-324)
FLOATS += (math.inf, -math.inf, math.nan)
WORDS = (
    "",
    "ddp",
    "allreduce",
    "kill",
    "stall",
    "hang",
    "bitflip",
    "partition",
    "reinit",
    "failstop",
    "restart",
    "torchft",
    "store",
    "lighthouse",
    "agent",
    "ttr_s",
    "ttd_s",
    "speed",
    "SIGKILL",
    "namespaces",
    "loopback",
    "../../x",
    "/etc/passwd",
    ".",
    "..",
    "a\nb",
    "\x1b[31mred\x1b[0m",
    "nul\x00byte",
    "tab\there",
    "\u202eevil",
    "²",
    "x" * 300,
)
KEYS = ("kind", "name", "x", "", "faults", "sweep", "0", "²", "a.b", "a\nb", "\x1b[2J", "duration_s", "seed")


def scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(NUMBERS),
        st.sampled_from(FLOATS),
        st.sampled_from(WORDS),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
        st.booleans(),
        st.dates(),
    )


def values() -> st.SearchStrategy[Any]:
    """Anything a TOML value can be, one level deep (deeper: :func:`nested`)."""
    keys = st.sampled_from(KEYS) | st.text(max_size=6)
    return st.one_of(scalars(), st.lists(scalars(), max_size=4), st.dictionaries(keys, scalars(), max_size=3))


def nested(depth: int) -> Any:
    """A list ``depth`` levels deep (or a table, every other level)."""
    node: Any = 1
    for i in range(depth):
        node = [node] if i % 2 else {"a": node}
    return node


# --- mutations of a base -------------------------------------------------------------------

Path = tuple[Any, ...]
Draw = Callable[[st.SearchStrategy[Any]], Any]


def paths(node: Any, prefix: Path = ()) -> list[Path]:
    """Every key and list index of ``node`` (the root excluded)."""
    found: list[Path] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        found.append((*prefix, k))
        found.extend(paths(v, (*prefix, k)))
    return found


def _parent(doc: Any, path: Path) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


def _set(draw: Draw, doc: dict[str, Any]) -> None:
    path = draw(st.sampled_from(paths(doc)))
    _parent(doc, path)[path[-1]] = draw(values())


def _number(draw: Draw, doc: dict[str, Any]) -> None:
    numeric = [p for p in paths(doc) if isinstance(_parent(doc, p)[p[-1]], (int, float))] or paths(doc)
    path = draw(st.sampled_from(numeric))
    _parent(doc, path)[path[-1]] = draw(st.sampled_from(NUMBERS + FLOATS))


def _word(draw: Draw, doc: dict[str, Any]) -> None:
    words = [p for p in paths(doc) if isinstance(_parent(doc, p)[p[-1]], str)] or paths(doc)
    path = draw(st.sampled_from(words))
    _parent(doc, path)[path[-1]] = draw(st.sampled_from(WORDS))


def _delete(draw: Draw, doc: dict[str, Any]) -> None:
    path = draw(st.sampled_from(paths(doc)))
    del _parent(doc, path)[path[-1]]


def _unknown_key(draw: Draw, doc: dict[str, Any]) -> None:
    tables = [()] + [p for p in paths(doc) if isinstance(_parent(doc, p)[p[-1]], dict)]
    path = draw(st.sampled_from(tables))
    table = _parent(doc, (*path, None)) if path else doc
    table[draw(st.sampled_from(KEYS) | st.text(max_size=8))] = draw(scalars())


def _faults(draw: Draw, doc: dict[str, Any]) -> None:
    count = draw(st.sampled_from((0, 2, 5, 31, 32, 33, 200)))  # 10,000: test_sizes_are_refused_before_the_work
    pool = doc.get("faults")
    if not isinstance(pool, list) or not pool:
        pool = [{"kind": "kill", "target": {"ranks": [1]}, "trigger": {"at_step": 2}}]
    doc["faults"] = [copy.deepcopy(pool[i % len(pool)]) for i in range(count)]


SWEEP_KEYS = (
    "workload.steps",
    "workload.world_size",
    "measure.seed",
    "recovery.strategy",
    "recovery.reinit.join_window_s",
    "recovery.torchft.min_replicas",
    "faults.0",
    "faults.0.duration_s",
    "faults.0.target.ranks.0",
    "faults.9.kind",
    "faults.².kind",
    "faults..kind",
    "launch.ranks_per_host",
    "name",
    "description",
    "measure.trials",
    "measure.deadline_s",
    "gate.factor",
    "gate",
    "sweep",
    "",
)


def _sweep(draw: Draw, doc: dict[str, Any]) -> None:
    key = draw(st.sampled_from(SWEEP_KEYS))
    if draw(st.booleans()):
        axis: Any = draw(st.lists(scalars(), max_size=5))
    else:  # long axes: past the point limit alone or multiplied, or a value twice
        length = draw(st.sampled_from((101, 10_001)))  # 101 x 101 is past the limit too
        axis = list(range(length)) if draw(st.booleans()) else [1] * length
    if not isinstance(doc.get("sweep"), dict):
        doc["sweep"] = {}
    doc["sweep"][key] = axis


def _nest(draw: Draw, doc: dict[str, Any]) -> None:
    path = draw(st.sampled_from(paths(doc)))
    _parent(doc, path)[path[-1]] = nested(draw(st.sampled_from((3, 31, 33, 60, 200))))


MUTATIONS = (_set, _number, _word, _delete, _unknown_key, _faults, _sweep, _nest)


@st.composite
def hostile_docs(draw: Draw) -> dict[str, Any]:
    """A base scenario with one to three mutations."""
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    for mutate in draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3)):
        if paths(doc):
            mutate(draw, doc)
    return doc


@st.composite
def hostile_bytes(draw: Draw) -> bytes:
    """A base scenario's TOML, broken as bytes: not UTF-8, cut, nested past any parser,
    NULs, too big, or with random bytes inserted."""
    data = toml(copy.deepcopy(draw(st.sampled_from(BASES)))).encode()
    at = draw(st.integers(min_value=0, max_value=len(data)))
    kind = draw(st.sampled_from(("insert", "cut", "nest", "table", "bom", "big", "crlf")))
    if kind == "insert":
        junk = draw(
            st.sampled_from((b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x00")) | st.binary()
        )
        return data[:at] + junk + data[at:]
    if kind == "cut":
        return data[:at]
    depth = draw(st.sampled_from((10, 33, 300, 100_000)))
    if kind == "nest":
        return data + b"x = " + b"[" * depth + b"]" * depth + b"\n"
    if kind == "table":
        return data + b"x = " + b"{a = " * depth + b"1" + b"}" * depth + b"\n"
    if kind == "bom":
        return b"\xef\xbb\xbf" + data
    if kind == "big":
        return data + b"#" * (1 << 20)
    return data.replace(b"\n", b"\r\n")


OVERRIDE_KEYS = SWEEP_KEYS + (
    "sweep.recovery.strategy",
    "sweep.measure.seed",
    "sweep.name",
    "sweep.faults.0.duration_s",
    "faults.0.kind",
    "faults.0.trigger.at_step",
    "workload",
    "faults",
    "recovery.torchft.min_replicas",
    "a.b.c",
    "workload.world_size ",
    " x",
)
VALID_OVERRIDES = (
    "workload.steps=150",
    "workload.world_size=6",
    "measure.seed=12",
    "measure.trials=1",
    "recovery.strategy=failstop",
    "faults.0.trigger.at_step=50",
    "sweep.measure.seed=[1, 2, 3]",
    'sweep.recovery.strategy=["reinit"]',
    "sweep.faults.0.duration_s=[1, 2]",
    "name=renamed",
    "description=a new text",
    "launch.start_method=spawn",
)
OVERRIDE_VALUES = (
    "3",
    "inf",
    "nan",
    "1e308",
    "-0",
    "9" * 30,
    "9" * 5000,
    '["failstop", "reinit"]',
    '["reinit", "reinit"]',
    "[]",
    "[1, 2, 3]",
    "{ kind = 'kill' }",
    "reinit",
    "torchft",
    "1\nname = 'x'",
    "[" * 2000 + "]" * 2000,
    "'\x1b[31m'",
    '"\\u0000"',
    "1979-05-27",
    "",
    "=",
)


@st.composite
def hostile_overrides(draw: Draw) -> str:
    """``KEY=VALUE`` as typed on a command line, or mistyped."""
    if draw(st.integers(0, 3)) == 0:
        return str(draw(st.sampled_from(VALID_OVERRIDES)))
    key = draw(st.sampled_from(OVERRIDE_KEYS) | st.text(max_size=10))
    value = draw(st.sampled_from(OVERRIDE_VALUES) | st.text(max_size=10))
    return f"{key}={value}" if draw(st.integers(0, 9)) else key
