"""A forked process's memory made its own (:mod:`bench.rank.private`), read back from the
kernel's own page map: nothing shared copy-on-write is left, and nothing is refused."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict

import pytest

from bench.rank import private

pytestmark = pytest.mark.skipif(not private.supported(), reason="the kernel lacks MADV_POPULATE_WRITE (Linux < 5.14)")


def _shared_anon_pages() -> int:
    """Pages of this process that are present, anonymous and not exclusively mapped."""
    count = 0
    fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        for lo, hi, _prot in private._regions():
            count += sum(1 for e in private._entries(fd, lo, hi) if e & private._SHARED_ANON_MASK == private._PRESENT)
    finally:
        os.close(fd)
    return count


def _in_child(body: Callable[[], dict[str, float]]) -> dict[str, float]:
    """What ``body`` returns in a child forked from this process. The child runs Python
    only: a fork of a process whose thread pools ran (torch's) must not use them."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.close(r)
        try:
            out = json.dumps(body())
        except BaseException as err:  # the parent reports it
            out = json.dumps({"error": repr(err)})
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        text = fh.read()
    os.waitpid(pid, 0)
    result: dict[str, float] = json.loads(text)
    assert "error" not in result, result
    return result


def test_a_forked_child_owns_its_memory_afterwards() -> None:
    blob = b"x" * (8 << 20)  # anonymous memory of the parent's, written, to share
    before = _in_child(lambda: {"shared": _shared_anon_pages()})
    assert before["shared"] > 1000  # a fork shares the parent's pages: the premise
    result = _in_child(lambda: asdict(private.make_private(os.getppid())) | {"after": _shared_anon_pages()})
    assert result["failed_ranges"] == 0
    assert result["copied_mib"] * 2**20 / private.PAGE >= 0.9 * before["shared"]
    assert result["mapped_mib"] > 0  # torch's libraries, resident in the parent
    assert result["after"] == 0
    assert len(blob) == 8 << 20  # alive until both children are done


def test_making_it_private_twice_copies_nothing_more() -> None:
    result = _in_child(lambda: [asdict(private.make_private(os.getppid())) for _ in range(2)][1])
    assert result["copied_mib"] == 0 and result["mapped_mib"] == 0 and result["failed_ranges"] == 0
