"""A host agent does only what its protocol allows: known commands, allow-listed
elastic agent arguments and environment (bench.hosts.agent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.hosts.agent import Agent, key, send
from bench.procs.events import EventWriter


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


def agent(tmp_path: Path) -> tuple[Agent, FakeStore]:
    store = FakeStore()
    return Agent(store, "h1", tmp_path, EventWriter(tmp_path / "agent-h1.jsonl", src="supervisor")), store


def test_commands_are_carried_out_in_order_once(tmp_path: Path) -> None:
    a, store = agent(tmp_path)
    send(store, "h1", {"op": "ending"})
    send(store, "h1", {"op": "stop"})
    a.commands()
    a.commands()
    assert a.ending and a.stopping and a.done == 2
    assert json.loads(store.get(key("h1", "cmd/1"))) == {"op": "stop"}


def test_unknown_commands_are_refused(tmp_path: Path) -> None:
    a, store = agent(tmp_path)
    send(store, "h1", {"op": "close"})  # a method of the agent, but no command
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
    send(store, "h1", {"op": "elastic", "strategy": "restart", "args": args, "env": env, "spec": {}})
    with pytest.raises(ValueError, match="not allowed"):
        a.commands()
    assert a.elastic is None
