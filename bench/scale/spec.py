"""What a scale sweep measures: coordinators, participant counts, repetitions, the time
budget of an operation and the coordinators' own settings; every key checked.

Given on the command line (``ftbench scale --set KEY=VALUE``, the value read as TOML);
bad input is a :class:`ConfigError` naming the key. The settings that are the stacks'
own (timeouts, intervals) default to values that keep a sweep short and are printed
beside the figures, with the stack's own default where they differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from bench.scale.coordinators import COORDINATORS
from bench.scenario.config import ConfigError
from bench.scenario.overrides import split_setting, toml_value

DEFAULT_SIZES: tuple[int, ...] = tuple(2**k for k in range(3, 11))
"""8 to 1,024 participants: the default sweep (minutes)."""
FULL_SIZES: tuple[int, ...] = tuple(2**k for k in range(3, 15))
"""8 to 16,384: ``--full`` (under half an hour; each coordinator stops at its limit)."""
MAX_N = 65_536
FULL_DEADLINE_S = 90.0
ONCE_ABOVE = 256
"""Above this many participants a point is measured once whatever ``repeats`` says: such
a point costs minutes, and the spread between its participants is the spread shown."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScaleSpec:
    coordinators: tuple[str, ...] = tuple(COORDINATORS)
    """Which coordinators to measure, in this order."""
    sizes: tuple[int, ...] = DEFAULT_SIZES
    """Participant counts, smallest first; a coordinator stops at the first it cannot do."""
    repeats: int = 1
    """Measurements of each point up to ONCE_ABOVE participants, a fresh coordinator each
    (``--full``: 2; the default sweep keeps to minutes with one)."""
    deadline_s: float = 20.0
    """Time budget of one operation: a participant without its result by then stops the
    operation (and those that need it) at that size; the limit printed is this budget.
    ``--full`` makes it FULL_DEADLINE_S."""
    resolver: Literal["isolated", "system"] = "isolated"
    """``isolated``: the benchmark's processes resolve names without the DNS server
    (system.py says why); ``system``: as the machine is set up."""
    server_family: Literal["inet", "v4-mapped"] = "inet"
    """The TCPStore server's socket: ``inet``, bound to 127.0.0.1; ``v4-mapped``, an IPv6
    socket bound to ::ffff:127.0.0.1 (still loopback only), whose clients appear to it as
    v4-mapped addresses, as they do to a store made the usual way (listening on every
    interface): the server then looks each one up in reverse (system.py says why that matters)."""
    rdzv_last_call_s: float = 1.0
    """torchrun rendezvous: wait after min_nodes before completing a round (torch: 30 s)."""
    rdzv_keep_alive_s: float = 5.0
    """torchrun rendezvous: keep-alive interval (torch's default). It decides more than the
    time a dead agent takes to be noticed: an agent whose keep-alive is older than interval
    x attempts is dropped from the round it is joining, so a round that takes longer to
    form than that churns and may never form (with 2 s x 3, 128 agents never did here)."""
    rdzv_keep_alive_attempts: int = 3
    """torchrun rendezvous: missed keep-alives before an agent is dead (torch's default)."""
    lh_heartbeat_ms: int = 1000
    """torchft: how often each replica group heartbeats (torchft's Manager: 100 ms)."""
    lh_heartbeat_timeout_ms: int = 5000
    """torchft lighthouse: heartbeat age after which a replica group is dead (torchft's default)."""
    lh_join_timeout_ms: int = 60_000
    """torchft lighthouse: wait for stragglers before a quorum of fewer (torchft: 60000)."""
    lh_quorum_tick_ms: int = 100
    """torchft lighthouse: how often it tries to form a quorum (torchft: 100)."""
    join_window_s: float = 0.5
    """membership: how long the coordinating member waits for one neither here nor dead (reinit: 0.5)."""
    handle_bytes: int = 32
    """membership: size of a reconfigure handle (torch 2.15.0's gloo handle, measured:
    27 bytes, ``gloo:0:-1:0:127.0.0.1:PORT``; a few more for a longer address and rank)."""
    value_bytes: int = 64
    """tcpstore: size of the value every client gets."""
    ranks_per_host: int = 8
    """nvrx: ranks per host in the Tree rank assignment's host layer."""
    max_workers: int = 8
    """Most participant processes (participants are spread over 2 or more); across hosts
    (``--agents-at``), the most on one host (every host has one at least)."""

    def repeats_at(self, n: int) -> int:
        return self.repeats if n <= ONCE_ABOVE else 1

    def knobs(self) -> dict[str, Any]:
        """The coordinators' settings, as participants and servers read them."""
        skip = {"coordinators", "sizes", "repeats", "deadline_s", "resolver", "max_workers"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


_POSITIVE_INT = "a positive integer"
_POSITIVE = "a positive number"


def _expect(key: str) -> str:
    return {
        "coordinators": f"a list of coordinators, some of {', '.join(COORDINATORS)}",
        "sizes": f"a list of participant counts, each from 2 to {MAX_N:,}",
        "repeats": "an integer from 1 to 20",
        "deadline_s": "a number of seconds from 1 to 3600",
        "resolver": '"isolated" or "system"',
        "server_family": '"inet" or "v4-mapped"',
        "max_workers": "an integer from 1 to 64",
    }.get(key, _POSITIVE_INT if isinstance(getattr(ScaleSpec(), key), int) else _POSITIVE)


def _int(v: Any, low: int, high: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def check(key: str, v: Any, where: str = "--set") -> Any:
    """One key's value, checked and normalised; a ConfigError naming ``key`` otherwise."""
    names = {f.name for f in fields(ScaleSpec)}
    if key not in names:
        raise ConfigError(where, key, "one of " + ", ".join(sorted(names)), v)
    ok: bool
    if key == "coordinators":
        ok = isinstance(v, list) and len(v) > 0 and all(isinstance(x, str) and x in COORDINATORS for x in v)
        v = tuple(dict.fromkeys(v)) if ok else v
    elif key == "sizes":
        ok = isinstance(v, list) and 0 < len(v) <= 64 and all(_int(x, 2, MAX_N) for x in v)
        v = tuple(sorted(set(v))) if ok else v
    elif key == "repeats":
        ok = _int(v, 1, 20)
    elif key == "max_workers":
        ok = _int(v, 1, 64)
    elif key == "deadline_s":
        ok = isinstance(v, int | float) and not isinstance(v, bool) and 1 <= v <= 3600
        v = float(v) if ok else v
    elif key == "resolver":
        ok = v in ("isolated", "system")
    elif key == "server_family":
        ok = v in ("inet", "v4-mapped")
    elif isinstance(getattr(ScaleSpec(), key), int):
        ok = _int(v, 1, 10**8)
    else:
        ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and 0 < v <= 1e6
        v = float(v) if ok else v
    if not ok:
        raise ConfigError(where, key, _expect(key), v)
    return v


def parse_set(item: str) -> tuple[str, Any]:
    """``KEY=VALUE``, the value read as TOML (else as a string), checked."""
    key, text = split_setting(item)
    return key, check(key, toml_value(text.strip()))


def build(sets: tuple[str, ...] = (), *, full: bool = False, base: ScaleSpec | None = None) -> ScaleSpec:
    """The default sweep (or ``full``'s sizes), then each ``--set``."""
    spec = base or (ScaleSpec(sizes=FULL_SIZES, deadline_s=FULL_DEADLINE_S, repeats=2) if full else ScaleSpec())
    changes = dict(parse_set(s) for s in sets)
    return replace(spec, **changes)


def from_dict(data: dict[str, Any], where: str) -> ScaleSpec:
    """A spec as a run's ``scale.json`` records it."""
    if not isinstance(data, dict):
        raise ConfigError(where, "spec", "a table of scale keys", data)
    known = {f.name for f in fields(ScaleSpec)}
    changes = {k: check(k, list(v) if isinstance(v, tuple) else v, where) for k, v in data.items() if k in known}
    return replace(ScaleSpec(), **changes)
