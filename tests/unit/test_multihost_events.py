"""Stamps of agent hosts mapped onto the harness's clock, and the uncertainty the
figures that subtract stamps of two hosts carry (bench.procs.events, window)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.procs.events import CLOCKS_FILE, EventWriter, read_events
from bench.results.derive import fault_figures

S = 10**9
CLOCKS = {
    "h0": {"offset_ns": -1000 * S, "err_ns": 30_000},
    "h1": {"offset_ns": -2000 * S, "err_ns": 50_000},
}


def write(directory: Path, monkeypatch, host: str | None, name: str, *events: tuple[str, int, dict]) -> None:
    if host:
        monkeypatch.setenv("FTBENCH_HOST", host)
    else:
        monkeypatch.delenv("FTBENCH_HOST", raising=False)
    w = EventWriter(directory / name, src="rank" if name.startswith("rank") else "supervisor")
    for kind, t, fields in events:
        w.emit(kind, t=t, **fields)
    w.close()


def trial(tmp_path: Path, monkeypatch, clocks: dict | None) -> Path:
    """A kill of host h1's ranks 2, 3 at harness time 100 s, seen by rank 0 on h0 12 ms later."""
    shift = {h: -c["offset_ns"] for h, c in (clocks or CLOCKS).items()} if clocks else {"h0": 0, "h1": 0}
    write(tmp_path, monkeypatch, None, "harness.jsonl", ("trial_start", 1 * S, {}))
    write(
        tmp_path,
        monkeypatch,
        "h1",
        "agent-h1.jsonl",
        (
            "inject",
            100 * S + shift["h1"],
            {"fault": 0, "kind": "kill", "ranks": [2, 3], "t_sent": 100 * S + shift["h1"] + 5},
        ),
    )
    write(
        tmp_path,
        monkeypatch,
        "h0",
        "rank0-1.jsonl",
        ("detect", 100 * S + 12_000_000 + shift["h0"], {"rank": 0, "how": "peer_reset"}),
        ("detect", 100 * S + 12_000_007 + shift["h0"], {"rank": 0, "how": "again"}),
    )
    if clocks:
        (tmp_path / CLOCKS_FILE).write_text(json.dumps(clocks))
    return tmp_path


def test_stamps_are_mapped_and_same_host_differences_stay_exact(tmp_path: Path, monkeypatch) -> None:
    events = read_events(trial(tmp_path, monkeypatch, CLOCKS))
    by = {(e["event"], e.get("how")): e for e in events}
    inject = by[("inject", None)]
    assert inject["t"] == 100 * S and inject["t_sent"] == 100 * S + 5
    assert inject["t_host"] == 2100 * S and inject["t_err"] == 50_000
    a, b = by[("detect", "peer_reset")], by[("detect", "again")]
    assert b["t"] - a["t"] == 7, "one host's stamps keep their nanoseconds"
    assert "t_err" not in by[("trial_start", None)], "the harness's own clock needs no mapping"


def test_cross_host_figure_carries_both_uncertainties(tmp_path: Path, monkeypatch) -> None:
    (row,) = fault_figures(
        read_events(trial(tmp_path, monkeypatch, CLOCKS)),
        faults=[("kill", "host 1")],
        steps=10,
        warmup_steps=0,
        phases=(),
    )
    assert row.figures["ttd_s"] == 0.012
    assert row.clock_err["ttd_err_s"] == (30_000 + 50_000) / 1e9
    assert row.clock_err["clock_err_s"] == (30_000 + 50_000) / 1e9
    assert "ttd_err_s" in row.row()


def test_one_host_trials_have_no_error_columns(tmp_path: Path, monkeypatch) -> None:
    (row,) = fault_figures(
        read_events(trial(tmp_path, monkeypatch, None)),
        faults=[("kill", "host 1")],
        steps=10,
        warmup_steps=0,
        phases=(),
    )
    assert row.figures["ttd_s"] == 0.012
    assert row.clock_err == {} and "ttd_err_s" not in row.row()


def test_report_shows_each_hosts_offset_and_the_worst_cross_host_uncertainty(tmp_path: Path) -> None:
    import pandas as pd

    from bench.report.tables import host_clocks
    from bench.results.reader import Run

    per = {h: dict(c, samples=64) for h, c in CLOCKS.items()}
    info = {"host_clocks": {"p" * 64: {"0": per, "1": per}}}
    trials = pd.DataFrame({"point_hash": ["p" * 64] * 2, "ttd_err_s": [0.0, 8e-5], "clock_err_s": [8e-5, 8e-5]})
    table = host_clocks([Run(path=tmp_path / "s" / "r", info=info, trials=trials)])
    assert table is not None
    assert list(table["host"]) == ["h0", "h1"]
    assert list(table["offset_s"]) == ["-1000.000000", "-2000.000000"]
    assert list(table["uncertainty_us (max)"]) == ["30.0", "50.0"]
    assert set(table["ttd_err_ms (max)"]) == {"0.080"}
    assert host_clocks([Run(path=tmp_path / "s" / "r", info={}, trials=trials)]) is None
