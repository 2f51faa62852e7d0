"""What one host can hold of a scale point's participants: its descriptors, ephemeral
ports, thread ids and memory, as :mod:`bench.scale.system` reads them.

The driver checks a point against these before it starts it (:meth:`Driver.limit`). On
one machine there is one such host, the harness's own. Across hosts each host reads its
own and sends them to the harness (:mod:`bench.scale.hostside`), because the
participants' side of every limit is per host: a participant's thread takes a thread id
on its own host, its connection an ephemeral port of its own host's address. The
coordinator's side (a descriptor per connection) stays the head's, where it runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bench.scale import system


@dataclass(frozen=True, slots=True)
class Capacity:
    """One host's limits, read at one moment (threads in use and memory change)."""

    descriptors: int
    """RLIMIT_NOFILE a process may raise itself to (the hard limit)."""
    ephemeral_ports: int
    pid_max: int
    threads_in_use: int
    memory_available_bytes: float

    @classmethod
    def here(cls) -> Capacity:
        pid_max, used = system.thread_ids()
        return cls(
            descriptors=system.fd_limit(),
            ephemeral_ports=system.ephemeral_ports(),
            pid_max=pid_max,
            threads_in_use=used,
            memory_available_bytes=system.memory_available(),
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> Capacity:
        """From a host's message: every field present, of its type (ValueError otherwise)."""
        if not isinstance(raw, dict):
            raise ValueError(f"a host's capacity: expected an object, got {type(raw).__name__}")
        try:
            return cls(
                descriptors=_count(raw["descriptors"]),
                ephemeral_ports=_count(raw["ephemeral_ports"]),
                pid_max=_count(raw["pid_max"]),
                threads_in_use=_count(raw["threads_in_use"]),
                memory_available_bytes=float(raw["memory_available_bytes"]),
            )
        except (KeyError, TypeError) as err:
            raise ValueError(f"a host's capacity: {err!r}") from None


def _count(v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f"a host's capacity: {v!r} is not a count")
    return v
