"""Clock alignment between hosts: a host's CLOCK_MONOTONIC mapped onto the controller's.

Each host stamps events with its own ``time.monotonic_ns()``; two hosts' monotonic
clocks share no origin (each counts from its own boot, or from its time namespace's
offset), so a figure that subtracts stamps of two hosts needs the offset between them.
It is estimated the way NTP does, with no assumption about the network: the host takes
``t_send``, asks the controller for its clock, the controller stamps ``remote``, the
host takes ``t_recv``. The controller's stamp was taken somewhere between the two host
stamps, so ``remote - (t_send + t_recv) / 2`` is the offset to within half the round
trip (plus the two clocks' resolutions), whatever the delays on either way. Of many round
trips the shortest gives the tightest bound; that sample is kept (min-RTT filter).

The round trips go through the trial's c10d store (the one channel every host already
has): the host sets ``PREFIX/req/K``, a responder thread of the controller waits for it
and sets ``PREFIX/resp/K`` to its clock, the host's ``get`` returns it. Only integers
travel (no pickle).

Drift: the offset is measured at the start and at the end of a trial;
:func:`combine` uses their mean and widens the uncertainty by half their difference,
so a clock that drifted during the trial shows as a larger error, never as a silent bias.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench.hosts.auth import Sealer

SAMPLES = 32
"""Round trips per estimate: enough that one of them is unperturbed by the scheduler
on a loaded host (two cores shared by ranks), at ~1 ms each."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One round trip: host clock before, controller clock, host clock after (ns)."""

    t_send: int
    remote: int
    t_recv: int

    @property
    def rtt(self) -> int:
        return self.t_recv - self.t_send


@dataclass(frozen=True, slots=True)
class Offset:
    """``controller_t = host_t + offset_ns``, true to within ``err_ns``."""

    offset_ns: int
    err_ns: int
    """Half the smallest round trip, plus both clocks' resolutions (rounded up)."""
    rtt_ns: int
    """The smallest round trip, the one the estimate comes from."""
    samples: int

    def to_controller(self, t: int) -> int:
        return t + self.offset_ns

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Offset:
        return cls(**{k: int(raw[k]) for k in ("offset_ns", "err_ns", "rtt_ns", "samples")})


def resolution_ns() -> int:
    """CLOCK_MONOTONIC's resolution here, in ns (at least 1)."""
    return max(1, math.ceil(time.clock_getres(time.CLOCK_MONOTONIC) * 1e9))


def estimate(samples: Sequence[Sample], *, resolution: int = 1, remote_resolution: int = 1) -> Offset:
    """The offset from the round trip with the smallest RTT (see the module docstring)."""
    if not samples:
        raise ValueError("no clock samples")
    bad = [s for s in samples if s.rtt < 0]
    if bad:
        raise ValueError(f"a round trip ended before it started: {bad[0]}")
    best = min(samples, key=lambda s: s.rtt)
    # (t_send + t_recv) / 2 rounded down; the rounding (< 1 ns) is inside the +1 below.
    offset = best.remote - (best.t_send + best.t_recv) // 2
    err = (best.rtt + 1) // 2 + resolution + remote_resolution
    return Offset(offset_ns=offset, err_ns=err, rtt_ns=best.rtt, samples=len(samples))


def combine(start: Offset, end: Offset | None) -> Offset:
    """One offset for a whole trial from its start and end estimates: their mean, with
    the larger error widened by half their difference (the drift over the trial)."""
    if end is None:
        return start
    drift = abs(end.offset_ns - start.offset_ns)
    return Offset(
        offset_ns=(start.offset_ns + end.offset_ns) // 2,
        err_ns=max(start.err_ns, end.err_ns) + (drift + 1) // 2 + 1,
        rtt_ns=min(start.rtt_ns, end.rtt_ns),
        samples=start.samples + end.samples,
    )


def measure(round_trip: Callable[[], Sample], n: int = SAMPLES, *, remote_resolution: int = 1) -> Offset:
    """``n`` round trips, then :func:`estimate`."""
    return estimate([round_trip() for _ in range(n)], resolution=resolution_ns(), remote_resolution=remote_resolution)


# -- through a c10d store ---------------------------------------------------------------


class StorePinger:
    """The host's side: round trips to a :class:`Responder` through ``store`` (any
    object with c10d's ``set``/``get``)."""

    def __init__(self, store: Any, prefix: str, sealer: Sealer) -> None:
        self.store = store
        self.prefix = prefix
        self.sealer = sealer
        self.k = 0

    def __call__(self) -> Sample:
        k, self.k = self.k, self.k + 1
        t_send = time.monotonic_ns()
        self.store.set(f"{self.prefix}/req/{k}", "t")
        raw = self.store.get(f"{self.prefix}/resp/{k}")
        t_recv = time.monotonic_ns()
        # Opened after the stamp: the check is not part of the round trip. A forged
        # answer (Forged) ends the measurement rather than skewing the offset.
        remote = int(self.sealer.open(f"{self.prefix}/resp/{k}", raw))
        return Sample(t_send, remote, t_recv)

    def measure(self, n: int = SAMPLES) -> Offset:
        return measure(self, n)

    def bye(self) -> None:
        """Tell the responder there will be no more requests."""
        self.store.set(f"{self.prefix}/req/{self.k}", "bye")


class Responder:
    """The controller's side: a thread that answers one host's requests with its clock.

    ``connect`` makes the thread's own store client (a c10d client is one connection;
    the harness's main thread keeps its own). The thread ends on ``bye``, on
    :meth:`stop` (which wakes it with a ``bye`` of its own), or when the store goes
    away; each wait is bounded by ``poll_s`` all the same.
    """

    def __init__(self, connect: Callable[[], Any], prefix: str, sealer: Sealer, *, poll_s: float = 60.0) -> None:
        self.prefix = prefix
        self.sealer = sealer
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._connect = connect
        self.answered = 0
        self.k = 0
        """The request the thread waits for."""
        self.thread = threading.Thread(target=self._run, name=f"clock-{prefix}", daemon=True)

    def start(self) -> Responder:
        self.thread.start()
        return self

    def _run(self) -> None:
        import datetime

        try:
            store = self._connect()
        except Exception:
            return
        while not self._stop.is_set():
            k = self.k
            key = f"{self.prefix}/req/{k}"
            try:
                store.wait([key], datetime.timedelta(seconds=self.poll_s))
            except Exception:  # a timeout (look at the stop flag again) or a dead store
                if not self._alive(store):
                    return
                continue
            now = time.monotonic_ns()
            try:
                if store.get(key) == b"bye":
                    return
                resp = f"{self.prefix}/resp/{k}"
                store.set(resp, self.sealer.seal(resp, now))
            except Exception:
                return
            self.answered += 1
            self.k = k + 1

    @staticmethod
    def _alive(store: Any) -> bool:
        try:
            store.check(["-"])
            return True
        except Exception:
            return False

    def stop(self, timeout_s: float = 2.0) -> None:
        """End the thread: flag it, and wake its wait with a ``bye`` on its next key."""
        self._stop.set()
        if not self.thread.is_alive():
            return
        try:
            self._connect().set(f"{self.prefix}/req/{self.k}", "bye")
        except Exception:  # the store is gone: the thread's wait ends with it
            pass
        self.thread.join(timeout_s)
