"""Deaths as the launcher reports them: the supervisor's half of the membership protocol.

Whoever reaps a rank process (ftbench's supervisor on one host, a host agent on its own
host, a scale run's participant standing for one) tells the ranks through the job's
store, in three writes, in this order:

- ``dead/<id>`` = the exit code: whether one id is dead is one ``check``;
- ``deaths``, appended ``"<id> "``: who died, in one ``get`` of a few bytes a death;
- ``ndeaths``, a counter: how many died, in one ``add(key, 0)``.

So the member that decides the next world (:mod:`bench.rank.membership`) learns how many
are dead in one request per poll, and who in one more when that count moves, instead of
one ``check`` per member per poll (the N requests every 2 ms that ``ftbench scale``
measured). The counter is written last, so a count always has its log entry and its
``dead/<id>`` behind it. An id lives again when a replacement takes it
(``Membership.grow`` deletes its ``dead/<id>``), so a log entry whose ``dead/<id>`` is
gone is the death of an earlier incarnation.

No torch here: the harness imports it.
"""

from __future__ import annotations

from typing import Any

DEATHS = "deaths"
DEATH_COUNT = "ndeaths"


def dead_key(rank: int) -> str:
    return f"dead/{rank}"


def report_death(store: Any, rank: int, code: int | None) -> None:
    """Tell the ranks that ``rank`` exited with ``code`` (its process is reaped)."""
    store.set(dead_key(rank), str(code))
    store.append(DEATHS, f"{rank} ")
    store.add(DEATH_COUNT, 1)
