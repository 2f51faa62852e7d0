"""What counts as a collective failure, and what ftbench puts in a stock stack's path."""

from __future__ import annotations

import pytest

from bench.rank.comm import CollectiveError, StockCollectives, classify, site


def test_gloo_messages_are_failures_other_errors_are_bugs() -> None:
    comm = StockCollectives(group_rank=0, group_size=4)
    gloo = RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:1: Connection reset by peer")
    err = comm.as_failure(gloo)
    assert isinstance(err, CollectiveError) and err.how == "peer_reset"
    assert comm.as_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None
    assert comm.as_failure(ValueError("Timed out")) is None
    assert classify("Timed out waiting 5000ms for recv operation") == "timeout"


def test_the_site_is_where_the_users_code_saw_the_exception() -> None:
    comm = StockCollectives(group_rank=0, group_size=4)
    with pytest.raises(RuntimeError) as info, site("backward"):
        raise RuntimeError("Connection closed by peer")
    err = comm.as_failure(info.value)
    assert err is not None and (err.how, err.site) == ("peer_closed", "backward")


def test_the_innermost_site_names_the_failure_and_one_site_serves_every_step() -> None:
    backward = site("backward")
    for _ in range(2):  # one instance, entered again each step (as the all_reduce wrapper's)
        with pytest.raises(RuntimeError) as info, site("step"), backward:
            raise RuntimeError("Connection closed by peer")
        assert info.value.site == "backward"  # type: ignore[attr-defined]
    with pytest.raises(ValueError) as bug, backward:
        raise ValueError("not a collective's")
    assert not hasattr(bug.value, "site")


def test_the_stock_path_has_no_interposer_unless_a_fault_or_the_scenario_asks() -> None:
    assert StockCollectives(group_rank=0, group_size=2).interposer == "none"
    assert StockCollectives(group_rank=0, group_size=2, interpose=True).interposer == "all_reduce-wrapper"
    assert StockCollectives(group_rank=0, group_size=2).averages, "stock DDP averages gradients"
