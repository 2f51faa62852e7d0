"""Growth models of a cost against a count (world size, participants), and the rule that
chooses one: the arithmetic ``ftbench project`` (phase growth over 2-8 ranks) and
``ftbench scale`` (coordinators over 8-16,384 participants) share.

Candidate models of the count ``n``, each ``a + b f(n)`` with ``b >= 0``:

- ``constant``:  y = a
- ``log``:       y = a + b log2(n)     (a tree, a fan-in)
- ``linear``:    y = a + b n           (a coordinator that serves each participant in turn)
- ``nlogn``:     y = a + b n log2(n)   (each serves all, sorted or through a tree)
- ``quadratic``: y = a + b n^2         (each participant reads what every other wrote)

The rule: the lowest small-sample AIC (AICc, Gaussian errors, ``k`` counting the noise
variance too) wins, but a sloped model must beat ``constant`` by more than
:data:`PARSIMONY` AICc units, and a model whose slope is negative is not a candidate (a
cost is not assumed to fall as the count grows: extrapolated, a falling line would
remove it); fewer than two distinct counts, or too few points for AICc, is ``constant``.

``relative`` fits weight each point by 1/y^2 (errors proportional to the value): a
latency measured from milliseconds to minutes has a spread that grows with it, and
unweighted least squares would fit the largest counts only. The phase fits of
``ftbench project`` (a few ranks, seconds each) are unweighted, as they always were.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

ModelName = Literal["constant", "log", "linear", "nlogn", "quadratic"]
ALL: tuple[ModelName, ...] = ("constant", "log", "linear", "nlogn", "quadratic")
#: AICc units a sloped model must gain over ``constant`` (Burnham & Anderson's "a
#: difference under 2 is no evidence").
PARSIMONY = 2.0
#: Relative floor on the residual sum of squares, so a perfect fit has a finite AICc.
RSS_FLOOR = 1e-12
#: Smallest value a relative weight is computed from (a latency of 0 would weigh infinitely).
WEIGHT_FLOOR = 1e-4


def transform(model: ModelName, n: np.ndarray) -> np.ndarray:
    """f(n) of a sloped model."""
    x = np.asarray(n, dtype=float)
    out: np.ndarray
    if model == "log":
        out = np.log2(x)
    elif model == "linear":
        out = x
    elif model == "nlogn":
        out = x * np.log2(x)
    elif model == "quadratic":
        out = x**2
    else:
        out = np.zeros_like(x)
    return out


def design(model: ModelName, n: np.ndarray) -> np.ndarray:
    """The columns of the least-squares problem for ``model`` at counts ``n``."""
    one = np.ones_like(np.asarray(n, dtype=float))
    if model == "constant":
        return one[:, None]
    return np.column_stack([one, transform(model, n)])


def basis(model: ModelName, n: float) -> np.ndarray:
    row: np.ndarray = design(model, np.array([float(n)]))[0]
    return row


@dataclass(frozen=True, slots=True)
class Fit:
    """One model fitted to (count, value) points."""

    model: ModelName
    coef: tuple[float, ...]
    rss: float
    aicc: float
    n: int

    def predict(self, x: float) -> float:
        """The value at count ``x``, never below zero."""
        return max(0.0, float(basis(self.model, x) @ np.array(self.coef)))

    def describe(self, unit: str = "w") -> str:
        if self.model == "constant":
            return f"constant {self.coef[0]:.3g} s"
        x = {"log": f"log2({unit})", "linear": unit, "nlogn": f"{unit} log2({unit})", "quadratic": f"{unit}^2"}[
            self.model
        ]
        sign = "+" if self.coef[1] >= 0 else "-"
        return f"{self.model}: {self.coef[0]:.3g} s {sign} {abs(self.coef[1]):.3g} s x {x}"


def fit_model(model: ModelName, n: Sequence[float], y: Sequence[float], *, relative: bool = False) -> Fit:
    """(Weighted) least squares of ``model``; AICc = m ln(RSS/m) + 2k + 2k(k+1)/(m-k-1), k the
    coefficients plus the variance (infinite when m <= k + 1: too few points to say)."""
    ns, ys = np.asarray(n, dtype=float), np.asarray(y, dtype=float)
    a = design(model, ns)
    w = 1.0 / np.maximum(np.abs(ys), WEIGHT_FLOOR) if relative else np.ones_like(ys)
    coef, *_ = np.linalg.lstsq(a * w[:, None], ys * w, rcond=None)
    resid = (ys - a @ coef) * w
    m = len(ys)
    scale = max(float(np.mean((ys * w) ** 2)), 1e-18)
    rss = max(float(resid @ resid), RSS_FLOOR * scale * m)
    k = a.shape[1] + 1
    aicc = math.inf if m <= k + 1 else m * math.log(rss / m) + 2 * k + 2 * k * (k + 1) / (m - k - 1)
    return Fit(model=model, coef=tuple(float(c) for c in coef), rss=rss, aicc=aicc, n=m)


@dataclass(frozen=True, slots=True)
class Choice:
    """The selected model, the candidates it was chosen among, and why."""

    fit: Fit
    candidates: tuple[Fit, ...]
    reason: str


def choose(
    n: Sequence[float], y: Sequence[float], *, models: Sequence[ModelName] = ALL, relative: bool = False
) -> Choice:
    """Fit every model of ``models`` and pick one by the rule in the module docstring."""
    sizes = sorted({float(x) for x in n})
    const = fit_model("constant", n, y, relative=relative)
    if len(sizes) < 2:
        return Choice(const, (const,), "one size only: constant")
    fits = (const, *(fit_model(m, n, y, relative=relative) for m in models if m != "constant"))
    rising = [f for f in fits[1:] if f.coef[1] >= 0]
    if not rising:
        return Choice(const, fits, "every sloped fit falls (a cost is not assumed to fall with the count): constant")
    sloped = min(rising, key=lambda f: f.aicc)
    if not math.isfinite(sloped.aicc):
        return Choice(const, fits, f"{len(y)} points: too few for AICc of a sloped model, constant")
    gain = const.aicc - sloped.aicc
    if gain > PARSIMONY:
        return Choice(
            sloped, fits, f"AICc {sloped.aicc:.1f} vs constant {const.aicc:.1f} (gain {gain:.1f} > {PARSIMONY:g})"
        )
    return Choice(const, fits, f"best sloped ({sloped.model}) gains {gain:.1f} <= {PARSIMONY:g} AICc: constant")


def crossing(fit: Fit, target: float, *, upto: float = 1e9) -> float | None:
    """The smallest count at which the fitted curve reaches ``target`` (it never falls,
    so it crosses once); None when it does not below ``upto``."""
    if fit.predict(1.0) >= target:
        return 1.0
    if fit.model == "constant" or fit.coef[1] <= 0 or fit.predict(upto) < target:
        return None
    lo, hi = 1.0, upto
    for _ in range(200):  # bisection on a log scale: counts span many orders of magnitude
        mid = math.sqrt(lo * hi)
        if fit.predict(mid) >= target:
            hi = mid
        else:
            lo = mid
        if hi / lo < 1.0001:
            break
    return hi
