"""The membership protocol of reinit and torch-reconfigure (``bench/rank/membership.py``),
its members as threads against a real TCPStore: who is in the next world (a death, a
stall, a late arrival, a second death during the agreement, the decider's own), the
resume step, the handle exchange through relays, growing back.

Bounds follow from the mechanism: a decision that closes on the count comes before a
join window it never waits for; one that waits for a silent member cannot come before
the window has passed."""

from __future__ import annotations

import datetime
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch.distributed as dist

from bench.procs.store import bound_store
from bench.rank import relay
from bench.rank.deaths import report_death
from bench.rank.membership import Left, Membership
from bench.rank.policy import World

LONG_WINDOW_S = 30.0
"""A join window no test waits out: a decision before it closed on the count."""
DEADLINE_S = 60.0


@pytest.fixture
def server() -> Iterator[dist.TCPStore]:
    yield bound_store("127.0.0.1", timeout_s=DEADLINE_S)


def client(server: dist.TCPStore) -> dist.TCPStore:
    return dist.TCPStore("127.0.0.1", server.port, None, False, timeout=datetime.timedelta(seconds=DEADLINE_S))


def member(
    server: dist.TCPStore, me: int, *, window_s: float = LONG_WINDOW_S, fanout: int = relay.FANOUT
) -> Membership:
    return Membership(client(server), me=me, join_window_s=window_s, timeout_s=DEADLINE_S, fanout=fanout)


def together(work: Callable[[int], Any], ids: list[int]) -> dict[int, Any]:
    """``work(id)`` for every id, each in a thread of its own, at once; every result."""
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            results[i] = work(i)
        except BaseException as err:  # reported below, in the test's thread
            errors.append(err)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert not errors, errors[:3]
    assert set(results) == set(ids), f"no result from {set(ids) - set(results)}"
    return results


class Killed(Exception):
    """A member's process died here."""


class Dies:
    """A member's store connection that stops after ``calls`` requests, as a process
    SIGKILLed at that point of the protocol leaves things: what it wrote stays, it
    writes nothing more."""

    def __init__(self, store: dist.TCPStore, calls: int) -> None:
        self.store, self.left = store, calls

    def __getattr__(self, name: str) -> Any:
        if self.left == 0:
            raise Killed(name)
        self.left -= 1
        return getattr(self.store, name)


def test_the_relay_tree_reaches_every_member_once_within_log_hops() -> None:
    for fanout in (2, 3, 32):
        for size in (*range(1, 70), 1000, 16_384):
            levels = math.ceil(math.log(size, fanout) - 1e-9) if size > 1 else 0
            served = [c for r in range(size) for c in relay.children(r, fanout, size)]
            assert sorted(served) == list(range(1, size)), (fanout, size)
            for c in range(1, size):
                assert c in relay.children(relay.parent(c, fanout), fanout, size)
                hops, r = 0, c
                while r:
                    r, hops = relay.parent(r, fanout), hops + 1
                assert hops <= levels, (fanout, size, c)
            assert all(len(relay.children(r, fanout, size)) <= (fanout - 1) * levels for r in range(0, size, fanout))


def test_a_death_closes_the_agreement_on_the_count_not_the_clock(server: dist.TCPStore) -> None:
    world = tuple(range(8))
    report_death(client(server), 7, -9)
    started = time.monotonic()
    worlds = together(lambda i: member(server, i).next_world(World(gen=0, members=world, me=i)), list(range(7)))
    assert time.monotonic() - started < LONG_WINDOW_S
    assert {w.members for w in worlds.values()} == {tuple(range(7))}
    assert all(w.gen == 1 for w in worlds.values())


def test_a_stalled_member_is_left_out_after_the_window_and_told_why_when_it_wakes(server: dist.TCPStore) -> None:
    window = 0.5
    world = tuple(range(5))
    started = time.monotonic()
    worlds = together(lambda i: member(server, i, window_s=window).next_world(World(0, world, i)), [0, 1, 2, 3])
    assert time.monotonic() - started >= window, "member 4 was neither here nor dead: the window of silence passed"
    assert {w.members for w in worlds.values()} == {(0, 1, 2, 3)}
    late = member(server, 4, window_s=window).next_world(World(0, world, 4))
    assert late == Left(gen=0, why="silent")


def test_survivors_still_arriving_keep_the_agreement_open(server: dist.TCPStore) -> None:
    """Arrivals 0.5 s apart over 3.5 s, a 2 s window: the window counts silence, so a
    clock that started with the first check-in cuts off nobody still coming in."""
    window, gap, ids = 2.0, 0.5, list(range(8))
    t0 = time.monotonic()

    def arrive(i: int) -> World | Left:
        time.sleep(max(0.0, t0 + i * gap - time.monotonic()))
        return member(server, i, window_s=window).next_world(World(0, tuple(ids), i))

    worlds = together(arrive, ids)
    assert {w.members for w in worlds.values() if isinstance(w, World)} == {tuple(ids)}
    assert time.monotonic() - t0 >= gap * (len(ids) - 1)


def test_a_second_death_during_the_agreement_even_the_deciders_own(server: dist.TCPStore) -> None:
    """Member 5 died first; member 0 checks in first (so it decides) and dies right after;
    the member that checked in second stands by and decides instead."""
    world = tuple(range(6))
    report_death(client(server), 5, -9)
    first_in = threading.Event()

    def run(i: int) -> World | Left | None:
        if i == 0:
            doomed = Membership(Dies(client(server), calls=2), me=0, join_window_s=LONG_WINDOW_S, timeout_s=DEADLINE_S)
            try:
                doomed.next_world(World(0, world, 0))  # checks in (append, add), then is killed
            except Killed:
                report_death(client(server), 0, -9)  # what the supervisor does when it reaps it
            first_in.set()
            return None
        first_in.wait(DEADLINE_S)
        return member(server, i).next_world(World(0, world, i))

    started = time.monotonic()
    worlds = together(run, list(world[:5]))
    assert time.monotonic() - started < LONG_WINDOW_S, "the standby closed on the count"
    assert {w.members for i, w in worlds.items() if i} == {(1, 2, 3, 4)}


def test_a_member_that_checked_in_and_died_before_the_agreement_closed_is_not_in_it(server: dist.TCPStore) -> None:
    """Member 4 is stalled, so the agreement waits out its window; meanwhile member 3 checks
    in and is killed. Here and dead, it is left out with the silent one. (Killed after
    the agreement closed, it would be in the next world, and the group's formation
    would fail on it: the protocol cannot know of a death nobody reported.)"""
    world, window = tuple(range(5)), 1.0
    probe = client(server)

    def run(i: int) -> World | Left | None:
        if i < 3:
            return member(server, i, window_s=window).next_world(World(0, world, i))
        deadline = time.monotonic() + DEADLINE_S
        while probe.add("g0/nhere", 0) < 3 and time.monotonic() < deadline:  # the others are in
            time.sleep(0.01)
        doomed = Membership(Dies(client(server), calls=2), me=3, join_window_s=window, timeout_s=DEADLINE_S)
        with pytest.raises(Killed):
            doomed.next_world(World(0, world, 3))
        report_death(client(server), 3, -9)
        return None

    worlds = together(run, [0, 1, 2, 3])
    assert {w.members for i, w in worlds.items() if i != 3} == {(0, 1, 2)}


def test_a_late_member_rejoins_at_the_next_growth(server: dist.TCPStore) -> None:
    world = (0, 1, 2, 3)
    first = together(lambda i: member(server, i, window_s=0.3).next_world(World(0, world, i)), [0, 1, 2])
    survivors = first[0]
    late = member(server, 3)
    assert late.next_world(World(0, world, 3)) == Left(gen=0, why="silent")
    g = late.request_join()
    assert g == survivors.gen
    rank0 = member(server, 0)
    rank0.announce_growth(survivors, 10)
    assert rank0.growth_step(survivors) == 10

    def grow(i: int) -> World | Left | None:
        if i == 3:
            return late.admitted(g)
        m = rank0 if i == 0 else member(server, i)
        return m.grow(World(survivors.gen, survivors.members, i))

    grown = together(grow, [0, 1, 2, 3])
    assert {w.members for w in grown.values() if isinstance(w, World)} == {(0, 1, 2, 3)}
    assert all(isinstance(w, World) and w.gen == survivors.gen + 1 for w in grown.values())


def test_an_id_that_lives_again_is_not_taken_for_dead(server: dist.TCPStore) -> None:
    """Member 2 dies, a replacement takes id 2 and joins; when member 1 dies later, the
    old death of 2 in the launcher's log does not remove the new 2."""
    report_death(client(server), 2, -9)
    after = together(lambda i: member(server, i).next_world(World(0, (0, 1, 2), i)), [0, 1])[0]
    replacement = member(server, 2)
    g = replacement.request_join()
    grown = together(
        lambda i: replacement.admitted(g) if i == 2 else member(server, i).grow(World(after.gen, after.members, i)),
        [0, 1, 2],
    )
    full = grown[0]
    assert isinstance(full, World) and full.members == (0, 1, 2)
    report_death(client(server), 1, -9)
    worlds = together(lambda i: member(server, i).next_world(World(full.gen, full.members, i)), [0, 2])
    assert {w.members for w in worlds.values()} == {(0, 2)}


@pytest.mark.parametrize(
    ("committed", "expected"),
    [([50, 50, 50, 50], (51, -1)), ([50, 49, 50, -1, 49], (50, 1))],
    ids=["the same step", "different steps and a joiner"],
)
def test_every_member_resumes_after_the_smallest_committed_step(
    server: dist.TCPStore, committed: list[int], expected: tuple[int, int]
) -> None:
    ids = list(range(10, 10 + len(committed)))
    world = tuple(ids)
    got = together(lambda i: member(server, i).agree_on_step(World(3, world, i), committed[i - 10]), ids)
    assert set(got.values()) == {expected}


@pytest.mark.parametrize("fanout", [2, 3, relay.FANOUT])
def test_every_member_gets_every_handle_in_rank_order(server: dist.TCPStore, fanout: int) -> None:
    """23 members: with a fan-out of 2 or 3 most of them read the handles from a relay
    member, 4 or 5 hops down; with the default every one reads the store."""
    world = tuple(range(100, 77, -1))  # group-rank order is not id order
    timeout = datetime.timedelta(seconds=DEADLINE_S)
    got = together(
        lambda i: member(server, i, fanout=fanout).exchange_handles(World(1, world, i), f"gloo:{i}", timeout),
        list(world),
    )
    assert all(h == [f"gloo:{m}" for m in world] for h in got.values())
