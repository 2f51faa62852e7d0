"""bench.stats against known values.

Reference values were computed with scipy 1.17.1 (``scipy.stats.mannwhitneyu`` with
``alternative="two-sided"`` and ``method="exact"`` or ``"asymptotic"``; ``numpy.percentile``;
``scipy.stats.binom``) in a throwaway environment; scipy is not a dependency.
"""

from __future__ import annotations

import math
from math import comb

import pytest

from bench.results.stats import (
    EXACT_MAX_N,
    describe,
    mann_whitney_u,
    median,
    median_ci,
    percentile,
    present,
    quantile_ci,
    statistic,
    u_distribution,
)


@pytest.mark.parametrize(
    "x, y, u, p",
    [
        ([1.1, 2.2, 3.3], [4.4, 5.5, 6.6], 0.0, 0.1),
        (
            [5.02, 5.03, 5.01, 5.04, 5.05, 5.00, 5.06],
            [3.02, 3.01, 3.03, 3.04, 3.00, 3.05, 3.06],
            49.0,
            0.0005827505827505828,
        ),
        ([0.2, 0.5, 0.9, 1.3, 2.0], [0.4, 0.6, 1.1, 1.7, 2.5, 3.0], 10.0, 0.42857142857142855),
        ([1, 2, 3, 4, 5, 6, 7, 8], [2.5, 3.5, 4.5, 9, 10, 11, 12, 13], 15.0, 0.08298368298368297),
    ],
)
def test_exact_mann_whitney_matches_scipy(x, y, u, p) -> None:
    r = mann_whitney_u(x, y)
    assert r.method == "exact"
    assert r.u == u
    assert r.p == pytest.approx(p, rel=1e-12)
    # symmetric: swapping the samples mirrors U and keeps p
    s = mann_whitney_u(y, x)
    assert s.u == len(x) * len(y) - u and s.p == pytest.approx(p, rel=1e-12)


def test_exact_p_by_hand() -> None:
    # 2 vs 2, completely separated: 1 arrangement in C(4,2)=6 at each extreme -> p = 2/6
    assert mann_whitney_u([1, 2], [3, 4]).p == pytest.approx(1 / 3)
    # 7 vs 7 separated: the smallest p the gate's minimum sample can give
    assert mann_whitney_u(range(7), range(10, 17)).p == pytest.approx(2 / comb(14, 7))
    # 3 vs 3 can never reach 0.05: why the gate demands more trials
    assert mann_whitney_u([1, 2, 3], [4, 5, 6]).p == pytest.approx(0.1)


@pytest.mark.parametrize(
    "x, y, u, p",
    [
        ([1, 2, 2, 3, 4, 4, 5], [3, 3, 4, 5, 6, 6, 7, 8], 9.5, 0.03539060700656296),
        ([0.2, 0.5, 0.9, 1.3, 2.0], [0.4, 0.6, 1.1, 1.7, 2.5, 3.0], 10.0, 0.41131379177625893),
    ],
)
def test_normal_approximation_with_ties_matches_scipy(x, y, u, p) -> None:
    r = mann_whitney_u(x, y, method="normal")
    assert r.method == "normal" and r.u == u
    assert r.p == pytest.approx(p, rel=1e-9)


def test_auto_chooses_by_ties_and_size() -> None:
    assert mann_whitney_u([1, 2, 2], [3, 4, 5]).method == "normal"  # ties
    assert mann_whitney_u([1, 2, 3], [4, 5, 6]).method == "exact"
    big = [float(i) for i in range(EXACT_MAX_N + 1)]
    assert mann_whitney_u(big, [v + 0.5 for v in big]).method == "normal"


def test_all_equal_is_not_significant() -> None:
    assert mann_whitney_u([1, 1, 1], [1, 1, 1]).p == 1.0


def test_refusals() -> None:
    with pytest.raises(ValueError):
        mann_whitney_u([], [1.0])
    with pytest.raises(ValueError):
        mann_whitney_u([1, 1], [2, 3], method="exact")


@pytest.mark.parametrize("m, n", [(1, 1), (3, 4), (7, 7), (5, 9)])
def test_u_distribution_is_a_distribution(m: int, n: int) -> None:
    counts = u_distribution(m, n)
    assert len(counts) == m * n + 1
    assert sum(counts) == comb(m + n, m)
    assert counts == counts[::-1]  # symmetric about mn/2
    assert min(counts) >= 1


def test_u_distribution_small_by_enumeration() -> None:
    # m=2, n=2: U values of the 6 arrangements are 0,1,2,2,3,4
    assert u_distribution(2, 2) == [1, 1, 2, 1, 1]


def test_percentile_matches_numpy() -> None:
    x = [3.0, 1.0, 4.0, 1.5, 5.0, 9.0, 2.6, 5.3, 5.8, 9.7]
    # numpy.percentile(x, [50, 90, 95, 99]) (linear, the default)
    for q, want in ((50, 4.5), (90, 9.07), (95, 9.385), (99, 9.637)):
        assert percentile(x, q) == pytest.approx(want)
    assert percentile([2.0], 95) == 2.0
    assert math.isnan(percentile([], 50))
    assert median([1, 3, 2, 4]) == 2.5
    with pytest.raises(ValueError):
        percentile(x, 101)


def test_median_ci_known_order_statistics() -> None:
    # n=10: P(B<=1) = 11/1024 <= 0.025 < P(B<=2) = 56/1024 -> [x(2), x(9)], coverage 1 - 22/1024
    x = [3.0, 1.0, 4.0, 1.5, 5.0, 9.0, 2.6, 5.3, 5.8, 9.7]
    ci = median_ci(x)
    assert (ci.low, ci.high) == (1.5, 9.0)
    assert ci.coverage == pytest.approx(1 - 22 / 1024)
    # n=6 is the smallest sample with a 95 % interval: [min, max], coverage 1 - 2/64
    ci6 = median_ci([6, 1, 5, 2, 4, 3])
    assert (ci6.low, ci6.high) == (1, 6) and ci6.coverage == pytest.approx(62 / 64)
    # n=5: [min, max] covers only 1 - 2/32 = 0.9375 < 0.95: no interval, said plainly
    ci5 = median_ci([1, 2, 3, 4, 5])
    assert not ci5.exists and math.isnan(ci5.low) and ci5.n == 5
    # a lower level is reachable with n=5
    assert median_ci([1, 2, 3, 4, 5], level=0.9).exists


def test_quantile_ci_upper_quantile() -> None:
    x = list(range(1, 101))  # 1..100
    ci = quantile_ci(x, 0.9)
    assert ci.exists and ci.low <= 90 <= ci.high
    assert ci.coverage >= 0.95
    assert not quantile_ci(list(range(10)), 0.9).exists  # too few for the 90th percentile


def test_present_and_summary_count_only_existing_values() -> None:
    vals = [1.0, float("nan"), None, 3.0, 2.0]
    assert present(vals) == [1.0, 3.0, 2.0]
    s = describe(vals)
    assert s.n == 3 and s.median == 2.0 and s.min == 1.0 and s.max == 3.0 and not s.ci.exists
    empty = describe([float("nan")])
    assert empty.n == 0 and math.isnan(empty.median)


def test_named_statistics() -> None:
    x = [1.0, 2.0, 3.0, 4.0]
    assert statistic(x, "median") == 2.5
    assert statistic(x, "mean") == 2.5
    assert statistic(x, "min") == 1.0 and statistic(x, "max") == 4.0
    assert statistic(x, "p90") == pytest.approx(3.7)
    assert math.isnan(statistic([], "p95"))
    with pytest.raises(ValueError):
        statistic(x, "p42x")
