"""A host agent does only what its protocol allows: sealed commands (bench.hosts.auth),
known ones, allow-listed elastic agent arguments and environment (bench.hosts.agent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.hosts.agent import Agent, key, send
from bench.hosts.auth import Sealer
from bench.procs.events import EventWriter, read_events

SEALER = Sealer("the-runs-secret-0123456789abcdef", "events/abc/0")


class FakeStore:
    """c10d's set/get/add, in a dict."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, k: str, v: str) -> None:
        self.data[k] = v.encode()

    def get(self, k: str) -> bytes:
        return self.data[k]

    def add(self, k: str, n: int) -> int:
        value = int(self.data.get(k, b"0")) + n
        self.data[k] = str(value).encode()
        return value

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)


def agent(tmp_path: Path) -> tuple[Agent, FakeStore]:
    store = FakeStore()
    return Agent(store, SEALER, "h1", tmp_path, EventWriter(tmp_path / "agent-h1.jsonl", src="supervisor")), store


def test_commands_are_carried_out_in_order_once(tmp_path: Path) -> None:
    a, store = agent(tmp_path)
    send(store, SEALER, "h1", {"op": "ending"})
    send(store, SEALER, "h1", {"op": "stop"})
    a.commands()
    a.commands()
    assert a.ending and a.stopping and a.done == 2
    assert SEALER.open(key("h1", "cmd/1"), store.get(key("h1", "cmd/1"))) == {"op": "stop"}


def test_forged_commands_are_refused_and_logged(tmp_path: Path) -> None:
    a, store = agent(tmp_path)
    send(store, Sealer("a-guess-0123456789abcdef", "events/abc/0"), "h1", {"op": "stop"})  # another secret
    send(store, Sealer(SEALER.secret, "events/abc/1"), "h1", {"op": "stop"})  # another trial's
    n = store.add(key("h1", "ncmd"), 1) - 1
    store.set(key("h1", f"cmd/{n}"), json.dumps({"op": "stop"}))  # no seal at all
    sealed = SEALER.seal(key("h1", "cmd/0"), {"op": "stop"})
    n = store.add(key("h1", "ncmd"), 1) - 1
    store.set(key("h1", f"cmd/{n}"), sealed)  # a good seal, another slot's
    a.commands()
    assert not a.stopping and a.done == 4
    refused = [e["key"] for e in read_events(tmp_path) if e["event"] == "refused"]
    assert refused == [key("h1", f"cmd/{i}") for i in range(4)]


def test_a_slot_taken_and_never_written_holds_up_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.hosts.agent as agent_module

    a, store = agent(tmp_path)
    store.add(key("h1", "ncmd"), 1)  # someone took slot 0 and never wrote it
    send(store, SEALER, "h1", {"op": "stop"})
    a.commands()
    assert not a.stopping  # slot 0 may still be on its way
    monkeypatch.setattr(agent_module, "GRACE_S", 0.0)
    a.commands()
    assert a.stopping


def test_unknown_commands_are_refused(tmp_path: Path) -> None:
    a, store = agent(tmp_path)
    send(store, SEALER, "h1", {"op": "close"})  # a method of the agent, but no command
    with pytest.raises(ValueError, match="unknown command"):
        a.commands()


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--nnodes=2", "--no-python"], {}), (["--nnodes=2"], {"LD_PRELOAD": "/tmp/x.so"})],
    ids=["argument", "environment"],
)
def test_elastic_agent_arguments_and_environment_are_allow_listed(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    a, store = agent(tmp_path)
    send(store, SEALER, "h1", {"op": "elastic", "strategy": "restart", "args": args, "env": env, "spec": {}})
    with pytest.raises(ValueError, match="not allowed"):
        a.commands()
    assert a.elastic is None
