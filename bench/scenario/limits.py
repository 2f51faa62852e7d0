"""What a scenario file may be and hold, checked before the work each limit bounds.

A scenario may come from a hostile or broken source (a CI pipeline's template, a fuzzer,
a file someone else wrote), and reading it must neither hang nor end in a traceback:
the file is checked to be a regular file of bounded size before it is read, its bytes
to be UTF-8, its nesting to be shallow before anything recurses through it, and the
sizes that multiply work (sweep points, faults) before any of that work is done. Each
limit is a constant here, listed in the README's "Scenario files" section.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.scenario.config import ConfigError, join

MAX_FILE_BYTES = 1 << 20
"""A scenario file is at most 1 MiB: the largest named scenario is under 3 KiB, and a
bound on the input bounds every list and table in it."""
MAX_DEPTH = 32
"""Levels of nested tables and lists: a real scenario uses about 8 (a swept list of
fault tables); past a few hundred, parsing and copying recurse out of the stack."""
MAX_POINTS = 10_000
"""Sweep points (the product of the axes' lengths), checked before expanding: each
point runs ``measure.trials`` trials, so more is no benchmark that ends."""
MAX_FAULTS = 32
"""``[[faults]]`` entries: rank-side faults are armed by ``SIGRTMIN + index``
(:func:`injectors.rankside.arm_signal`), which Linux has about 31 of; see
:func:`rt_signals`."""
MAX_SECONDS = 86_400
"""A trial's deadline, timeouts and trigger times are at most a day."""
MAX_NAME = 64
"""Characters of a scenario name: it names a results directory."""
SEED_FACTOR = 1_000_003
"""The workloads seed a step's generator with ``seed * SEED_FACTOR + step``
(``torch.Generator().manual_seed``), which must stay below 2**63."""

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_TOML_WHERE = re.compile(r"\s*\(at (line \d+, column \d+|end of document)\)$")
#: Characters a description may not hold: controls other than newline and tab (ANSI
#: escapes, NUL, carriage return) and the bidirectional overrides that reorder text.
_BAD_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def read_text(path: Path, file: str) -> str:
    """The text of a regular file of at most :data:`MAX_FILE_BYTES` bytes of UTF-8.

    A FIFO, device, socket or directory is refused from its ``stat``, before any open;
    the open itself is non-blocking and re-checked with ``fstat``, so a file swapped
    for a FIFO in between cannot block the reader either.
    """
    try:
        kind = _kind(os.stat(path).st_mode)
        data = _read_regular(path, file) if kind is None else b""
    except OSError as err:
        raise ConfigError(file, "", "a readable file", err.strerror or str(err)) from None
    except ConfigError:
        raise
    except ValueError:  # a NUL in the path
        raise ConfigError(file, "", "a file name without NUL characters") from None
    if kind is not None:
        raise ConfigError(file, "", "a regular file", kind)
    try:
        return data.decode("utf-8").removeprefix("\ufeff")  # an editor's byte-order mark
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        start = data.rfind(b"\n", 0, err.start) + 1
        column = len(data[start : err.start].decode("utf-8")) + 1
        raise ConfigError(file, f"line {line}, column {column}", "UTF-8 text", data[err.start : err.end]) from None


def _read_regular(path: Path, file: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        kind = _kind(st.st_mode)
        if kind is not None:
            raise ConfigError(file, "", "a regular file", kind)
        chunks, size = [], 0
        while size <= MAX_FILE_BYTES:  # st_size is not trusted (/proc files say 0)
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > MAX_FILE_BYTES:
        raise ConfigError(file, "", f"a file of at most {MAX_FILE_BYTES} bytes", f"{max(size, st.st_size)} bytes")
    return b"".join(chunks)


def _kind(mode: int) -> str | None:
    """None for a regular file, else what it is, in words."""
    if stat.S_ISREG(mode):
        return None
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((what for test, what in kinds if test(mode)), "a special file")


def parse_toml(text: str, file: str) -> dict[str, Any]:
    """Parsed TOML; a syntax error names the line and column as its key."""
    _check_dotted_keys(text, file)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        message = str(err)
        where = _TOML_WHERE.search(message)
        key = where.group(1) if where else ""
        raise ConfigError(file, key, "valid TOML", _TOML_WHERE.sub("", message)) from None
    except RecursionError:
        raise ConfigError(file, "", f"valid TOML nested at most {MAX_DEPTH} levels deep") from None
    except ValueError as err:  # an integer of more than 4300 digits
        raise ConfigError(file, "", "valid TOML", str(err).split(":")[0]) from None


_TOKEN = re.compile(
    r"""(?P<skip>\"\"\"[\s\S]*?\"\"\"|'\'\'[\s\S]*?'\'\'|\#[^\n]*+)"""  # multi-line strings, comments
    r"""|(?P<part>[A-Za-z0-9_-]++|"(?:[^"\\\n]|\\.)*+"|'[^'\n]*+')"""  # a key part (or a value)
    r"""|(?P<dot>[ \t]*+\.[ \t]*+)"""
    r"""|(?P<other>[\s\S])"""
)


def _check_dotted_keys(text: str, file: str) -> None:
    """Refuse a dotted key of more than :data:`MAX_DEPTH` parts before ``tomllib`` sees
    it: the parser's cost grows with the square of a key's parts (a 1 MiB key of
    ``a.a.a...`` runs for an hour), and such a key nests too deep anyway."""
    parts, previous = 0, ""
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup or ""
        if kind == "part" and previous == "dot":
            parts += 1
            if parts > MAX_DEPTH:
                line = text.count("\n", 0, match.start()) + 1
                column = match.start() - text.rfind("\n", 0, match.start())
                where = f"line {line}, column {column}"
                raise ConfigError(file, where, f"dotted keys of at most {MAX_DEPTH + 1} parts", f"{parts + 1} parts")
        elif kind != "part" and not (kind == "dot" and previous == "part"):
            parts = 0
        previous = kind


def check_depth(value: Any, file: str, where: str = "") -> None:
    """Refuse tables and lists nested more than :data:`MAX_DEPTH` levels, without
    recursing (the point is to stop what would recurse too deep)."""
    stack = [(value, where, 0)]
    while stack:
        node, key, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(file, key, f"at most {MAX_DEPTH} levels of nested tables and lists")
        if isinstance(node, Mapping):
            stack.extend((v, join(key, str(k)), depth + 1) for k, v in node.items())
        elif isinstance(node, (list, tuple)):
            stack.extend((v, join(key, i), depth + 1) for i, v in enumerate(node))


def check_name(name: Any, file: str, key: str = "name") -> str:
    """A scenario name: it becomes a directory under ``results/``, so never a path."""
    if not isinstance(name, str) or len(name) > MAX_NAME or not NAME.fullmatch(name):
        raise ConfigError(
            file,
            key,
            f"a name of letters, digits, '.', '_' and '-' (at most {MAX_NAME}, the first a letter or digit)",
            name,
        )
    return name


def default_name(stem: str) -> str:
    """The name of a scenario that gives none: its file's stem, made a valid name."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("._-")[:MAX_NAME]
    return name or "scenario"


def check_description(text: Any, file: str) -> str:
    """Free text for people, printed as is: newlines and tabs, but no terminal controls."""
    if not isinstance(text, str) or _BAD_TEXT.search(text):
        raise ConfigError(file, "description", "text without control characters other than newline and tab", text)
    return text


def rt_signals() -> int:
    """Real-time signals available to arm rank-side faults (0 where there are none)."""
    low, high = getattr(signal, "SIGRTMIN", None), getattr(signal, "SIGRTMAX", None)
    return int(high) - int(low) + 1 if low is not None and high is not None else 0
