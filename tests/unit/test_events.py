"""The event log keeps whole lines only, and the tail sees lines as they complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bench.procs.events import EventTail, EventWriter, _encode, read_events


def test_writer_and_tail(tmp_path: Path) -> None:
    w = EventWriter(tmp_path / "a.jsonl", src="rank", rank=1)
    tail = EventTail(tmp_path)
    t = w.emit("step_end", step=1)
    got = tail.poll()
    assert [(e["event"], e["rank"], e["step"], e["t"]) for e in got] == [("step_end", 1, 1, t)]
    assert tail.poll() == []
    w.emit("detect", t=5, how="timeout")
    assert [e["t"] for e in tail.poll()] == [5]


def test_partial_line_waits_for_its_end(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    tail = EventTail(tmp_path)
    path.write_bytes(b'{"t": 1, "event": "x"}\n{"t": 2, "ev')
    assert [e["t"] for e in tail.poll()] == [1]
    with open(path, "ab") as fh:
        fh.write(b'ent": "y"}\n')
    assert [e["event"] for e in tail.poll()] == ["y"]


def test_read_events_orders_by_time_and_skips_a_cut_line(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"t": 3, "event": "c"}\n{"t": 1, "event": "a"}\n')
    (tmp_path / "b.jsonl").write_text('{"t": 2, "event": "b"}\n{"t": 4, "eve')
    assert [e["event"] for e in read_events(tmp_path)] == ["a", "b", "c"]


_VALUES = st.one_of(
    st.integers(),
    st.floats(),  # NaN and the infinities too: those lines take the encoder
    st.booleans(),
    st.none(),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(
    base=st.dictionaries(st.sampled_from(["src", "rank", "host", "wall", "event"]), _VALUES, max_size=3),
    # every key but "event" (the event's name, a parameter): "t" is one too, a stamp
    fields=st.dictionaries(st.text(min_size=1, max_size=6).filter(lambda k: k != "event"), _VALUES, max_size=6),
)
@example(base={}, fields={"t": False})
@example(base={}, fields={"t": float("nan"), "x": 1})
@example(base={}, fields={"t": None, "wall": 1})
@example(base={"rank": 0}, fields={"rank": 1.5, "step": 2})
@example(base={"wall": 0}, fields={"step": 2})
def test_every_line_is_the_encoders_line(tmp_path_factory: pytest.TempPathFactory, base: dict, fields: dict) -> None:
    """The numbers-only template and the JSON encoder write the same line, whatever the
    fields (keys that are no identifiers, that repeat a base field, values of any kind)."""
    path = tmp_path_factory.mktemp("ev") / "a.jsonl"
    stamp = fields.pop("t", None)  # the stamp parameter: None is now
    w = EventWriter(path, **base)
    w.emit("step_end", t=stamp, **fields)
    w.emit("step_end", t=stamp, **fields)  # the second from the cached template
    w.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    for line in lines:
        got = json.loads(line)
        assert _encode(got["t"]) == _encode(stamp) if stamp is not None else type(got["t"]) is int
        expected = {"t": got["t"], "wall": got["wall"], "event": "step_end", **w.base, **fields}
        assert list(got) == list(expected)
        assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)
        assert line == _encode(expected)
