"""The event log keeps whole lines only, and the tail sees lines as they complete."""

from __future__ import annotations

from pathlib import Path

from bench.procs.events import EventTail, EventWriter, read_events


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
