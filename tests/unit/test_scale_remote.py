"""``ftbench scale`` across hosts, the parts that need no second host: the messages
between the harness and a host's agent (what a host accepts, what the harness accepts
back), their channel through a real c10d store (slots, seals, forgeries), the clock
uncertainty a point's figures carry, and the per-host limits."""

from __future__ import annotations

import datetime
import json
import random
from collections.abc import Iterator
from dataclasses import fields
from typing import Any

import pytest

from bench.hosts.auth import Forged, Sealer
from bench.hosts.clock import Offset
from bench.scale.capacity import Capacity
from bench.scale.coordinators import COORDINATORS
from bench.scale.driver import MAX_THREADS, side_limit
from bench.scale.participants import Context
from bench.scale.remote import (
    Channel,
    Refused,
    RequestState,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
    worst_error,
)
from bench.scale.spec import ScaleSpec

CTX = Context(
    coordinator="membership",
    n=16,
    address="198.18.3.254:4000",
    port=4000,
    rep=1,
    deadline_s=20.0,
    knobs=ScaleSpec().knobs(),
    host="198.18.3.254",
)


def wire(body: Any) -> Any:
    """What crosses the network: JSON text."""
    return json.loads(json.dumps(body))


def test_every_request_arrives_as_the_tuple_a_local_process_takes() -> None:
    state = RequestState()
    setup = decode_request(wire(encode_request(("setup", CTX, "ignored:Class", [0, 5, 15]))), state)
    assert setup[0] == "setup" and setup[3] == [0, 5, 15]
    assert Context(**setup[1]) == CTX
    # The participants' code is the coordinators' table's, whatever the harness named.
    assert setup[2] == COORDINATORS["membership"].participant
    assert decode_request(wire(encode_request(("kill", [15]))), state) == ("kill", [15])
    assert decode_request(wire(encode_request(("arm", "agree", [1, 2]))), state) == ("arm", "agree", [1, 2])
    go = decode_request(wire(encode_request(("go", 2_000_123_456_789_012, 20.0))), state)
    assert go == ("go", 2_000_123_456_789_012, 20.0)
    assert decode_request(wire(encode_request(("reset",))), state) == ("reset",)
    assert decode_request(wire(encode_request(("close",))), state) == ("close",)


def _setup(**ctx: Any) -> dict[str, Any]:
    body = wire(encode_request(("setup", CTX, "", [0])))
    body["ctx"].update(ctx)
    return body


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (_setup(coordinator="os.system"), "no coordinator"),
        (_setup(knobs={"__class__": 1}), "knobs are not the sweep's settings"),
        (_setup(knobs={"join_window_s": -1}), "join_window_s"),
        (_setup(host="evil.example.com"), "not an IP address"),
        (_setup(n=10**9), "ctx.n"),
        (_setup(port="4000"), "ctx.port"),
        (_setup(extra=1), "fields"),
        ({"op": "setup", "ctx": "x", "ids": [0]}, "ctx: not an object"),
        ({**_setup(), "ids": [0, 16]}, "a participant id"),
        ({**_setup(), "ids": [True]}, "a participant id"),
        ({"op": "exec", "code": "print(1)"}, "no such request"),
        (["setup"], "not a message"),
    ],
)
def test_a_request_outside_the_protocol_is_refused(body: Any, says: str) -> None:
    with pytest.raises(Refused, match=says):
        decode_request(body, RequestState())


def test_requests_are_checked_against_the_points_coordinator() -> None:
    with pytest.raises(Refused, match="before setup"):
        decode_request({"op": "arm", "name": "agree", "ids": [0]}, RequestState())
    state = RequestState()
    decode_request(_setup(), state)
    with pytest.raises(Refused, match="no operation 'connect'"):
        decode_request({"op": "arm", "name": "connect", "ids": [0]}, state)
    with pytest.raises(Refused, match="a participant id"):
        decode_request({"op": "kill", "ids": [16]}, state)
    with pytest.raises(Refused, match="release_ns"):
        decode_request({"op": "go", "release_ns": -1, "wait_s": 1.0}, state)


def test_every_answer_arrives_as_the_tuple_the_driver_takes() -> None:
    answers: list[tuple[Any, ...]] = [
        ("started", 4242, ""),
        ("ready", {3: "RuntimeError: refused"}, 0.25, 2),
        ("killed", {}),
        ("armed", 8),
        ("done", [(0, 123_456_789_000, ""), (1, None, "no result within 20 s")], 0.5, 1200),
        ("reset",),
        ("closed",),
    ]
    for msg in answers:
        back = decode_reply(wire(encode_reply(msg)))
        assert back == msg, (back, msg)


@pytest.mark.parametrize(
    "body",
    [
        {"op": "done", "results": [["0", 1, ""]], "cpu_s": 0.1, "late_ns": 0},
        {"op": "done", "results": [[0, 1.5, ""]], "cpu_s": 0.1, "late_ns": 0},
        {"op": "done", "results": [[0, 1, "x" * 10_000]], "cpu_s": 0.1, "late_ns": 0},
        {"op": "done", "results": "all fine", "cpu_s": 0.1, "late_ns": 0},
        {"op": "ready", "errors": {"0": "x"}, "seconds": 1, "retries": 0},
        {"op": "started", "pid": 0, "note": ""},
        {"op": "armed", "count": float("nan")},
        {"op": "pickle", "data": "gASVAAAAAAAAAAB9lC4="},
    ],
)
def test_an_answer_outside_the_protocol_is_refused(body: Any) -> None:
    with pytest.raises(Refused):
        decode_reply(body)


@pytest.fixture
def store() -> Iterator[Any]:
    """A client of a real store on loopback, the run store's prefix (the server lives as
    long as the test)."""
    import torch.distributed as dist

    from bench.procs.store import bound_store

    server = bound_store("127.0.0.1", timeout_s=10)
    client = dist.TCPStore("127.0.0.1", server.port, None, False, timeout=datetime.timedelta(seconds=10))
    yield dist.PrefixStore("ftbrun", client)
    del client, server


def test_a_channel_keeps_order_and_leaves_nothing_in_the_store(store: Any) -> None:
    sealer = Sealer("the-runs-secret-0123456789", "scale:nonce:session")
    out, into = Channel(store, sealer, "scale/s/h0/w0/in"), Channel(store, sealer, "scale/s/h0/w0/in")
    for i in range(5):
        out.put({"op": "n", "i": i})
    assert [into.take()["i"] for _ in range(5)] == list(range(5))
    assert not store.check([f"scale/s/h0/w0/in/{i}" for i in range(5)]), "read slots are deleted"
    assert not into.check() and not into.wait(0.05)


def test_a_forged_or_moved_message_is_refused_and_the_real_one_read(store: Any) -> None:
    secret = "the-runs-secret-0123456789"
    sealer = Sealer(secret, "scale:nonce:session")
    refused: list[str] = []
    into = Channel(store, sealer, "scale/s/h0/ctl/in", refused.append)
    # Another session's message (its scope), then one sealed for slot 1 put in slot 0.
    store.set("scale/s/h0/ctl/in/0", Sealer(secret, "scale:nonce:other").seal("scale/s/h0/ctl/in/0", {"op": "end"}))
    with pytest.raises(Forged):
        into.take(timeout_s=0.1)
    store.set("scale/s/h0/ctl/in/0", sealer.seal("scale/s/h0/ctl/in/1", {"op": "end"}))
    with pytest.raises(Forged):
        into.take(timeout_s=0.1)
    assert len(refused) == 2 and all("MAC does not match" in r for r in refused), refused
    Channel(store, sealer, "scale/s/h0/ctl/in").put({"op": "capacity"})  # the harness's own overwrites it
    assert into.take() == {"op": "capacity"}


def test_the_start_estimate_is_within_the_stated_error_of_the_offset_all_point_long() -> None:
    """The true offset drifts linearly from a to b over a point; the start estimate (what
    the release was mapped with) lies within its error of a, the end estimate within its
    error of b: :func:`worst_error` bounds the start estimate's distance to the offset
    at every moment of the point."""
    rng = random.Random(42)
    for _ in range(500):
        a = rng.randint(-(10**12), 10**12)
        b = a + rng.randint(-50_000, 50_000)
        e0, e1 = rng.randint(1, 100_000), rng.randint(1, 100_000)
        start = Offset(a + rng.randint(-e0, e0), e0, 2 * e0, 32)
        end = Offset(b + rng.randint(-e1, e1), e1, 2 * e1, 32)
        bound = worst_error(start, end)
        for f in (0.0, 0.25, 0.5, 1.0):
            truth = a + f * (b - a)
            assert abs(start.offset_ns - truth) <= bound + 1e-6, (start, end, f)
    # Tight: no drift, the start's own error.
    assert worst_error(Offset(5, 100, 200, 32), Offset(5, 50, 100, 32)) == 100


def test_the_participants_side_is_checked_on_each_host() -> None:
    big = Capacity(
        descriptors=1_000_000,
        ephemeral_ports=28_232,
        pid_max=4_194_304,
        threads_in_use=500,
        memory_available_bytes=1e12,
    )
    member = COORDINATORS["membership"]
    assert side_limit(member, "h1: ", 4096, 2, big) is None
    few_ids = Capacity(**{**{f.name: getattr(big, f.name) for f in fields(big)}, "pid_max": 5_000})
    limit = side_limit(member, "h1: ", 4096, 2, few_ids)
    assert limit is not None and limit[0] == "thread ids" and limit[1].startswith("h1: 4,096 threads")
    ports = side_limit(member, "h0: ", 14_000, 8, big)
    assert ports is not None and ports[0] == "ephemeral ports" and "h0: 28,000 connections" in ports[1]
    lighthouse = COORDINATORS["lighthouse"]
    threads = side_limit(lighthouse, "", MAX_THREADS // lighthouse.threads + 1, 8, big)
    assert threads is not None and threads[0] == "threads"


@pytest.mark.parametrize("bad", [{"descriptors": True}, {"pid_max": -1}, {"ephemeral_ports": "many"}, {}])
def test_a_hosts_capacity_must_be_counts(bad: dict[str, Any]) -> None:
    raw = {**Capacity.here().as_dict(), **bad} if bad else {"descriptors": 1}
    with pytest.raises(ValueError):
        Capacity.from_dict(raw)
