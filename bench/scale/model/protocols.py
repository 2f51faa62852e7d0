"""Each operation's protocol as the model replays it, read from the stacks' own code: a
participant's requests in order, which of them the coordinator holds until others have
arrived (a gate), and the timers and ticks a gate waits for. How much each request
costs is not here: it comes from the run's readings (:mod:`bench.scale.model.demand`),
spread over the requests declared here, with the bytes where the protocol puts them.

A gate opens when every participant that takes part has arrived at it (``count``), no
sooner than its timer (a heartbeat or keep-alive expiring, counted from the release) and
at the coordinator's next tick where it decides on ticks; then the coordinator answers
every held request, one after another. torchrun's rendezvous is not a gate but a race:
every agent rewrites the whole state with compare-and-set, and a lost write is retried
with the state that won (:data:`RENDEZVOUS`, replayed by :mod:`bench.scale.model.sim`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Timer = Callable[[dict[str, Any], random.Random], float]


@dataclass(frozen=True, slots=True)
class Step:
    """One request of a participant's program."""

    share: float = 1.0
    """Its share of the bytes a participant moves in the operation."""
    gate: int = -1
    """Held at this gate (index into :attr:`Protocol.gates`) until it opens; -1: answered at once."""
    relay: int = 0
    """Not the coordinator's: a value every member needs whole, read from a member above
    it in a tree of this fan-out (each relay sends it to its children one after another)."""
    relay_bytes: Callable[[int, dict[str, Any]], float] | None = None
    """That value's size at N participants."""


@dataclass(frozen=True, slots=True)
class Gate:
    tick_ms: str = ""
    """Knob naming the coordinator's decision period: the gate opens at the first tick
    after every participant arrived (torchft's quorum tick)."""
    timer: Timer | None = None
    """Seconds after the release before which the gate cannot open (a dead participant's
    heartbeat expiring)."""
    poll_s: float = 0.0
    """The member deciding polls the coordinator this often: the gate opens at its next
    poll after the last arrival (and each poll is two requests meanwhile)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Protocol:
    steps: tuple[Step, ...] = ()
    gates: tuple[Gate, ...] = ()
    race: Literal["", "rendezvous"] = ""
    """Replayed as a compare-and-set race instead of steps."""
    heartbeat_ms: str = ""
    """Knob naming how often every participant heartbeats the coordinator meanwhile: a
    load on it that grows with N whatever the operation (and in the run's readings the
    heartbeats of the operation's whole duration, which are not the operation's requests)."""
    code: str
    """Where in the stack's code the sequence is, for the reader."""

    def requests(self, n: int) -> int:
        """Requests a participant sends the coordinator, as declared."""
        return sum(1 for s in self.steps if not s.relay)


def _heartbeat_expiry(knobs: dict[str, Any], rng: random.Random) -> float:
    # The victim's last heartbeat came at a uniform moment of its last interval before the release.
    return float(knobs["lh_heartbeat_timeout_ms"]) / 1e3 - rng.uniform(0, float(knobs["lh_heartbeat_ms"]) / 1e3)


def _keep_alive_expiry(knobs: dict[str, Any], rng: random.Random) -> float:
    # The dead agent's last keep-alive is its join of the round just formed, moments before.
    return float(knobs["rdzv_keep_alive_s"]) * int(knobs["rdzv_keep_alive_attempts"])


def _handles(n: int, knobs: dict[str, Any]) -> float:
    # Every member's handle, JSON-quoted and comma-separated.
    return n * (float(knobs.get("handle_bytes", 32)) + 4)


R, HELD = Step(), Step(gate=0)

PROTOCOLS: dict[tuple[str, str], Protocol] = {}
for _store in ("tcpstore-libuv", "tcpstore-legacy"):
    PROTOCOLS[_store, "connect"] = Protocol(
        steps=(R, R), code="TCPStore client constructor: connect, then the validation request"
    )
    PROTOCOLS[_store, "barrier"] = Protocol(
        steps=(R, R, HELD),
        gates=(Gate(),),
        code="distributed_c10d._store_based_barrier: add 1, add 0, wait for the key the last arrival sets",
    )
    PROTOCOLS[_store, "get"] = Protocol(
        steps=(R, R), code="TCPStore.get: wait for the key (participant 0 sets it at the release), then get"
    )
PROTOCOLS.update(
    {
        ("rendezvous", "form"): Protocol(
            race="rendezvous",
            code="dynamic_rendezvous: each agent waits U(0, 0.3) s in round 0, reads the state, adds itself "
            "and writes the whole pickled state with compare_set, retrying with the state that won; the round is "
            "complete when the last of max_nodes joins; agents already in poll every 1 s (_delay(1)) until then",
        ),
        ("rendezvous", "kill"): Protocol(
            race="rendezvous",
            gates=(Gate(timer=_keep_alive_expiry),),
            code="dynamic_rendezvous: the survivors' next round waits for the dead agent's keep-alives to "
            "expire (interval x attempts), then forms as above without it",
        ),
        ("lighthouse", "quorum"): Protocol(
            steps=(Step(gate=0),),
            gates=(Gate(),),
            heartbeat_ms="lh_heartbeat_ms",
            code="torchft lighthouse: a quorum request is held until every heartbeating group asked; the last "
            "one's arrival forms it, and each is answered with every member (O(N) bytes each)",
        ),
        ("lighthouse", "failover"): Protocol(
            steps=(Step(gate=0),),
            gates=(Gate(tick_ms="lh_quorum_tick_ms", timer=_heartbeat_expiry),),
            heartbeat_ms="lh_heartbeat_ms",
            code="torchft lighthouse: the dead group counts until its heartbeat is heartbeat_timeout old; then "
            "at the next tick every live group is answered with the quorum without it",
        ),
        ("nvrx", "barrier"): Protocol(
            steps=(R, R, HELD),
            gates=(Gate(),),
            code="inprocess.store.StoreMixin.barrier: add, append the ranks, wait for the last arrival's key",
        ),
        ("nvrx", "restart"): Protocol(
            steps=(R, Step(share=4.0), HELD, R, Step(share=2.0), R, R),
            gates=(Gate(),),
            code="StoreMixin.reentrant_barrier (append, get the whole arrived list, wait), then "
            "get_terminated_ranks (append, get) and ShiftRanks' reads",
        ),
        ("nvrx", "tree"): Protocol(
            steps=(R, Step(share=8.0, gate=0), R, Step(share=8.0, gate=1)),
            gates=(Gate(), Gate()),
            code="rank_assignment.Tree: send_state, multi_get every rank's state (held until all are set), "
            "send_key, multi_get every key",
        ),
        ("membership", "abort"): Protocol(
            steps=(R, R, R), code="Membership.report_failure (member 0), the watcher's wait and get of the key"
        ),
        ("membership", "agree"): Protocol(
            steps=(R, R, R, Step(gate=0), R),
            gates=(Gate(poll_s=0.002),),
            code="Membership.next_world: report, append to the check-in log, count in; the first in decides, "
            "polling the check-in and death counters every 2 ms, and publishes the change once every member is "
            "here or dead; each waits for it and reads it (the deaths: O(1) bytes)",
        ),
        ("membership", "resume"): Protocol(
            steps=(R, Step(gate=0), R),
            gates=(Gate(),),
            code="Membership.agree_on_step: set the committed step; rank 0 reads all with one multi_get once every "
            "one is set and writes the decision once; the others wait for it and read it",
        ),
        ("membership", "handles"): Protocol(
            steps=(R, Step(gate=0), R, Step(relay=32, relay_bytes=_handles)),
            gates=(Gate(),),
            code="Membership.exchange_handles: set the handle; rank 0 multi_gets them once every one is set and "
            "writes them as one value; the root's 32 children read it from the store, every other member from "
            "the member above it in a tree of fan-out 32 (bench/rank/relay.py), after reading that one's address",
        ),
    }
)

SERVING_THREADS: dict[str, tuple[int, str]] = {
    "tcpstore-libuv": (1, "one libuv event loop thread serves every connection"),
    "tcpstore-legacy": (1, "one thread polls every connection"),
    "lighthouse": (
        0,
        "a tokio runtime, a thread per core of its host: each RPC (a heartbeat, a quorum answer of every "
        "member) is handled on any of them; only the quorum state's lock, held briefly, is serial",
    ),
}
"""Threads that serve a coordinator's requests; 0: one per core of its host."""

POLLS_EVERY_CONNECTION = frozenset({"tcpstore-legacy"})
"""Servers whose loop visits every open connection for a request (the legacy TCPStore's
poll). libuv's epoll and tokio hand the loop only the connections that are ready, so
for them the fitted cost per request per open connection has no mechanism on a host of
their own: it is this machine's (on-CPU time per request rising with the threads that
share its cores), kept where the machine shares the coordinator's cores."""


def serving_threads(server: str, cores: int) -> int:
    threads = SERVING_THREADS[server][0]
    return threads if threads > 0 else max(1, cores)


RENDEZVOUS_JITTER_S = (0.0, 0.3)
"""An agent's first join of round 0 waits a uniform delay in this range (torch's
``DynamicRendezvousHandler.next_rendezvous``: spreads the first attempts)."""
RENDEZVOUS_POLL_S = 1.0
"""An agent in a round not yet complete syncs again after this long (``_delay(seconds=1)``)."""
