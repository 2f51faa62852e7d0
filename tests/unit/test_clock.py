"""Clock alignment: the min-RTT estimate and its stated uncertainty (bench.hosts.clock)."""

from __future__ import annotations

import random

import pytest

from bench.hosts.clock import Offset, Sample, combine, estimate


def trip(truth: int, t_send: int, out_ns: int, back_ns: int) -> Sample:
    """A round trip with the given one-way delays; the controller's clock is the host's + truth."""
    return Sample(t_send, t_send + out_ns + truth, t_send + out_ns + back_ns)


def test_truth_within_stated_error_whatever_the_asymmetry() -> None:
    rng = random.Random(7)
    truth = -1_000_000_000_000  # the host's clock is 1000 s ahead of the controller's
    for _ in range(200):
        samples = [trip(truth, 10**9 * i, rng.randint(0, 5_000_000), rng.randint(0, 5_000_000)) for i in range(16)]
        est = estimate(samples)
        assert abs(est.offset_ns - truth) <= est.err_ns
        assert est.rtt_ns == min(s.rtt for s in samples)


def test_min_rtt_sample_wins() -> None:
    truth = 123_456
    samples = [
        trip(truth, 0, 9_000_000, 1_000),
        trip(truth, 50_000_000, 200, 300),
        trip(truth, 90_000_000, 1_000, 9_000_000),
    ]
    est = estimate(samples, resolution=1, remote_resolution=1)
    assert est.rtt_ns == 500
    assert est.err_ns == 250 + 2
    assert abs(est.offset_ns - truth) <= est.err_ns


def test_worst_case_asymmetry_is_exactly_at_the_bound() -> None:
    """All of the round trip on the way out: the estimate is off by rtt/2, which the error covers."""
    est = estimate([trip(0, 0, 1_000_000, 0)], resolution=0, remote_resolution=0)
    assert abs(est.offset_ns) == 500_000
    assert est.err_ns == 500_000


def test_refuses_nothing_and_negative_round_trips() -> None:
    with pytest.raises(ValueError):
        estimate([])
    with pytest.raises(ValueError):
        estimate([Sample(10, 0, 5)])


def test_combine_widens_by_drift() -> None:
    a = Offset(offset_ns=1_000, err_ns=100, rtt_ns=200, samples=8)
    b = Offset(offset_ns=1_600, err_ns=50, rtt_ns=100, samples=8)
    c = combine(a, b)
    assert c.offset_ns == 1_300
    # Both the start and the end truth lie within the combined bound.
    for end in (a, b):
        assert abs(c.offset_ns - end.offset_ns) + end.err_ns <= c.err_ns
    assert combine(a, None) == a
    assert Offset.from_dict(c.as_dict()) == c
