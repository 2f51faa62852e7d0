"""Statistics for recovery latencies: medians, their confidence intervals, Mann-Whitney U.

Recovery latencies are not normal: they sit on hard floors (a process-group timeout)
with long right tails (a retransmit, a slow import), and a benchmark run has few trials.
So everything here is distribution-free and exact where it can be:

- the **median** with a confidence interval from order statistics (binomial), which
  makes no assumption about the shape and says plainly when ``n`` is too small to reach
  the requested level;
- the two-sided **Mann-Whitney U** test, with the exact null distribution for small
  samples without ties (a normal approximation would be off exactly where CI runs
  live: 5-10 trials a side) and the normal approximation with tie and continuity
  correction otherwise (the same as ``scipy.stats.mannwhitneyu``'s ``asymptotic``).

Pure Python on purpose: the harness must not pull scipy into every CI job. Inputs are
plain sequences of numbers that exist; a figure that does not exist (NaN) has to be
dropped by the caller with :func:`present`, so that ``n`` always counts what was used.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

#: Largest sample (either side) for which ``method="auto"`` uses the exact distribution.
EXACT_MAX_N = 50


def present(values: Iterable[float | None]) -> list[float]:
    """The values that exist: ``None`` and NaN (a figure the outcome has not) dropped."""
    return [float(v) for v in values if v is not None and not math.isnan(float(v))]


def median(values: Sequence[float]) -> float:
    """Median (mean of the middle two for even ``n``); NaN for an empty sample."""
    return percentile(values, 50.0)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between order statistics
    (Hyndman-Fan type 7, the default of numpy and pandas, so figures agree with users'
    own notebooks). NaN for an empty sample."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must lie in [0, 100], got {q}")
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class Interval:
    """A confidence interval from order statistics.

    ``low``/``high`` are NaN when the sample is too small for any pair of order
    statistics to reach the requested level (e.g. a 95 % interval of the median needs
    n >= 6); ``coverage`` is the exact probability that the interval covers the true
    quantile (at least the requested level when the bounds exist).
    """

    low: float
    high: float
    coverage: float
    n: int

    @property
    def exists(self) -> bool:
        return not math.isnan(self.low)


def _binom_cdf_numerators(n: int, p: Fraction) -> tuple[list[int], int]:
    """P(B <= k) for B ~ Binomial(n, p) and every k in 0..n, exactly, as integer
    numerators over one common denominator ``b ** n`` (``p = a / b``): one running sum
    whose terms ``comb(n, i) a^i (b - a)^(n - i)`` follow from each other by a ratio, so
    thousands of trials cost milliseconds where a sum of fractions per ``k`` took hours."""
    a, b = p.numerator, p.denominator
    c = b - a
    term = c**n  # i = 0
    total, cdf = 0, []
    for i in range(n + 1):
        total += term
        cdf.append(total)
        if i < n:
            term = term * (n - i) * a // ((i + 1) * c)  # exact: the next term is an integer
    return cdf, b**n


@functools.lru_cache(maxsize=256)
def _order_statistics(n: int, p: Fraction, tail: Fraction) -> tuple[int, int, float] | None:
    """The 1-based order statistics ``(l, u)`` of :func:`quantile_ci` and their exact
    coverage, or None when no pair reaches the level. They depend on ``n`` and the level
    alone, not on the values, so a report's many cells of one ``n`` compute them once."""
    cdf, den = _binom_cdf_numerators(n, p)
    # cdf[k] / den <= tail  <=>  cdf[k] * tail.den <= tail.numerator * den (all integers)
    bound = tail.numerator * den
    lows = [i for i in range(1, n + 1) if cdf[i - 1] * tail.denominator <= bound]
    highs = [j for j in range(1, n + 1) if (den - cdf[j - 1]) * tail.denominator <= bound]
    if not lows or not highs or min(highs) <= max(lows) - 1:
        return None
    lo, hi = max(lows), min(highs)
    return lo, hi, float(Fraction(cdf[hi - 1] - cdf[lo - 1], den))


def quantile_ci(values: Sequence[float], q: float = 0.5, level: float = 0.95) -> Interval:
    """Distribution-free confidence interval of the ``q`` quantile (0 < q < 1).

    With order statistics x(1) <= ... <= x(n) and B ~ Binomial(n, q), the interval
    [x(l), x(u)] covers the true quantile with probability P(l <= B <= u - 1). ``l`` is
    the largest index whose lower tail P(B <= l - 1) is at most (1 - level) / 2 and
    ``u`` the smallest whose upper tail P(B >= u) is at most (1 - level) / 2: equal
    tails, each no larger than half the error rate.
    """
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile q must lie in (0, 1), got {q}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must lie in (0, 1), got {level}")
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    p = Fraction(q).limit_denominator(10**6)
    tail = Fraction(1 - level).limit_denominator(10**9) / 2
    found = _order_statistics(n, p, tail)
    if found is None:
        return Interval(math.nan, math.nan, math.nan, n)
    lo, hi, coverage = found
    return Interval(xs[lo - 1], xs[hi - 1], coverage, n)


def median_ci(values: Sequence[float], level: float = 0.95) -> Interval:
    """Confidence interval of the median; see :func:`quantile_ci`."""
    return quantile_ci(values, 0.5, level)


@dataclass(frozen=True, slots=True)
class MannWhitney:
    """Result of a two-sided Mann-Whitney U test of ``x`` against ``y``.

    ``u`` is the statistic of ``x`` (the number of pairs with x > y, ties counting one
    half); ``p`` is two-sided; ``method`` says how it was obtained.
    """

    u: float
    p: float
    method: Literal["exact", "normal"]
    n_x: int
    n_y: int


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) and the sizes of the groups of tied values."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


def u_distribution(m: int, n: int) -> list[int]:
    """Number of arrangements of ``m`` x's and ``n`` y's with U = 0, 1, ..., m*n.

    These are the coefficients of the Gaussian binomial [m+n choose m]_q
    = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i), computed exactly in integers by
    multiplying by each numerator and dividing by each denominator (a strided
    cumulative sum); they add up to C(m+n, m).
    """
    size = m * n + 1
    c = [0] * size
    c[0] = 1
    for i in range(1, m + 1):
        k = n + i
        for u in range(size - 1, k - 1, -1):
            c[u] -= c[u - k]
        for u in range(i, size):
            c[u] += c[u - i]
    return c


def mann_whitney_u(
    x: Sequence[float], y: Sequence[float], method: Literal["auto", "exact", "normal"] = "auto", continuity: bool = True
) -> MannWhitney:
    """Two-sided Mann-Whitney U test: do ``x`` and ``y`` come from one distribution?

    ``auto`` uses the exact null distribution when there are no ties and neither sample
    exceeds :data:`EXACT_MAX_N`, otherwise the normal approximation with the tie
    correction of the variance and (by default) a continuity correction of 0.5.
    ``exact`` with ties is refused: the exact distribution assumes distinct values.
    """
    m, n = len(x), len(y)
    if m == 0 or n == 0:
        raise ValueError(f"Mann-Whitney U needs two non-empty samples, got sizes {m} and {n}")
    ranks, ties = _ranks([*x, *y])
    r_x = sum(ranks[:m])
    u_x = r_x - m * (m + 1) / 2
    has_ties = any(t > 1 for t in ties)
    if method == "auto":
        method = "exact" if not has_ties and max(m, n) <= EXACT_MAX_N else "normal"
    if method == "exact":
        if has_ties:
            raise ValueError("the exact Mann-Whitney distribution needs distinct values; use method='normal'")
        counts = u_distribution(m, n)
        total = sum(counts)
        u = round(u_x)
        lower = sum(counts[: u + 1])  # P(U <= u) * total
        upper = sum(counts[u:])  # P(U >= u) * total
        p = min(1.0, 2 * min(lower, upper) / total)
        return MannWhitney(u=u_x, p=p, method="exact", n_x=m, n_y=n)
    big_n = m + n
    tie_term = sum(t**3 - t for t in ties) / (big_n * (big_n - 1))
    var = m * n / 12 * ((big_n + 1) - tie_term)
    if var <= 0:
        return MannWhitney(u=u_x, p=1.0, method="normal", n_x=m, n_y=n)  # every value equal
    dev = abs(u_x - m * n / 2) - (0.5 if continuity else 0.0)
    z = max(dev, 0.0) / math.sqrt(var)
    p = min(1.0, math.erfc(z / math.sqrt(2)))
    return MannWhitney(u=u_x, p=p, method="normal", n_x=m, n_y=n)


@dataclass(frozen=True, slots=True)
class Description:
    """What a report says about one figure of one point: ``n`` first, then the median
    with its confidence interval, the spread and the upper percentiles."""

    n: int
    median: float
    ci: Interval
    min: float
    max: float
    p90: float
    p95: float
    p99: float
    mean: float


def describe(values: Iterable[float | None], level: float = 0.95) -> Description:
    """Description of the values that exist (NaN and None dropped; ``n`` counts the rest)."""
    xs = present(values)
    return Description(
        n=len(xs),
        median=median(xs),
        ci=median_ci(xs, level),
        min=min(xs) if xs else math.nan,
        max=max(xs) if xs else math.nan,
        p90=percentile(xs, 90),
        p95=percentile(xs, 95),
        p99=percentile(xs, 99),
        mean=sum(xs) / len(xs) if xs else math.nan,
    )


STATS = ("median", "mean", "min", "max", "p90", "p95", "p99")


def statistic(values: Sequence[float], stat: str) -> float:
    """One named statistic (the ``stat`` of a ``[[gate.slo]]`` entry); NaN when empty."""
    if stat not in STATS:
        raise ValueError(f"statistic must be one of {', '.join(STATS)}, got {stat!r}")
    if not values:
        return math.nan
    if stat == "mean":
        return sum(values) / len(values)
    if stat == "min":
        return min(values)
    if stat == "max":
        return max(values)
    if stat == "median":
        return median(values)
    return percentile(values, float(stat[1:]))


def median_difference_ci(
    x: Sequence[float], y: Sequence[float], level: float = 0.95, resamples: int = 4000, seed: int = 0
) -> Interval:
    """Bootstrap (percentile) confidence interval of ``median(x) - median(y)``.

    Both samples are resampled with replacement, independently, ``resamples`` times with a
    seeded generator, so the same data always gives the same interval. ``coverage`` is the
    nominal level; NaN bounds when a sample is empty.
    """
    return _bootstrap_medians(x, y, lambda a, b: a - b, level, resamples, seed)


def median_ratio_ci(
    x: Sequence[float], y: Sequence[float], level: float = 0.95, resamples: int = 4000, seed: int = 0
) -> Interval:
    """Bootstrap (percentile) confidence interval of ``median(x) / median(y)``, as
    :func:`median_difference_ci` (``y`` must be positive)."""
    return _bootstrap_medians(x, y, lambda a, b: a / b, level, resamples, seed)


def bootstrap_median_ci(values: Sequence[float], level: float = 0.95, resamples: int = 4000, seed: int = 0) -> Interval:
    """Bootstrap (percentile) confidence interval of one sample's median, seeded: for
    paired ratios, where each value already compares two things measured together."""
    import random

    xs = list(values)
    if not xs:
        return Interval(math.nan, math.nan, math.nan, 0)
    rng = random.Random(seed)
    meds = sorted(median(rng.choices(xs, k=len(xs))) for _ in range(resamples))
    tail = (1 - level) / 2 * 100
    return Interval(percentile(meds, tail), percentile(meds, 100 - tail), level, len(xs))


def _bootstrap_medians(
    x: Sequence[float],
    y: Sequence[float],
    op: Callable[[float, float], float],
    level: float,
    resamples: int,
    seed: int,
) -> Interval:
    import random

    xs, ys = list(x), list(y)
    if not xs or not ys:
        return Interval(math.nan, math.nan, math.nan, 0)
    rng = random.Random(seed)
    stats = sorted(op(median(rng.choices(xs, k=len(xs))), median(rng.choices(ys, k=len(ys)))) for _ in range(resamples))
    tail = (1 - level) / 2 * 100
    return Interval(percentile(stats, tail), percentile(stats, 100 - tail), level, min(len(xs), len(ys)))
