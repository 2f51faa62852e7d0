"""Which recovery phases grow with the job: a model per phase, chosen by a stated rule.

A phase measured at a few world sizes (2, 4, 8 ranks on one machine) is fitted by
least squares with three candidate models of the world size ``w``:

- ``constant``:    y = a
- ``log``:         y = a + b * log2(w)   (tree-shaped collectives, a store's fan-in)
- ``linear``:      y = a + b * w         (a coordinator that talks to every rank in turn)

Every trial's value is a data point (not the per-size median), so the fit sees the
spread. The rule: the model with the lowest small-sample AIC (AICc, Gaussian errors,
``k`` counting the noise variance too) wins, but a model with a slope must beat
``constant`` by more than :data:`PARSIMONY` AICc units, and a model whose slope is
negative is not a candidate (a phase is not assumed to get faster as the job grows:
extrapolated, a falling line would remove the phase altogether); with fewer than two
world sizes or too few points for AICc, the phase is ``constant``. The choice is made once on all
the data; the uncertainty of the chosen model's parameters is carried by the caller
(:mod:`bench.project.model`) by refitting it on bootstrap resamples of the trials.

Extrapolating from 8 ranks to 100,000 GPUs is four orders of magnitude: the band a
bootstrap gives is the uncertainty of the slope, not a guarantee that the model form
holds that far. ``docs/project.md`` says so; the CLI prints the chosen model beside
every figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

ModelName = Literal["constant", "log", "linear"]
MODELS: tuple[ModelName, ...] = ("constant", "log", "linear")
#: AICc units a sloped model must gain over ``constant`` before it is preferred (the
#: usual "difference of 2 is no evidence" rule of thumb, Burnham & Anderson).
PARSIMONY = 2.0
#: Relative floor on the residual sum of squares, so that a perfect fit (RSS = 0) has a
#: finite AIC; 1e-12 of the data's own scale changes no ranking of real data.
RSS_FLOOR = 1e-12


def design(model: ModelName, w: np.ndarray) -> np.ndarray:
    """The columns of the least-squares problem for ``model`` at world sizes ``w``."""
    one = np.ones_like(w, dtype=float)
    if model == "constant":
        return one[:, None]
    x = np.log2(w) if model == "log" else w.astype(float)
    return np.column_stack([one, x])


def basis(model: ModelName, w: float) -> np.ndarray:
    """One row of :func:`design`, for predicting at world size ``w``."""
    row: np.ndarray = design(model, np.array([float(w)]))[0]
    return row


@dataclass(frozen=True, slots=True)
class Fit:
    """One model fitted to (world size, seconds) points."""

    model: ModelName
    coef: tuple[float, ...]
    rss: float
    aicc: float
    n: int

    def predict(self, w: float) -> float:
        """Seconds at world size ``w``, never below zero (a phase cannot take negative
        time; a falling fitted line extrapolated far would say it does)."""
        return max(0.0, float(basis(self.model, w) @ np.array(self.coef)))

    def describe(self) -> str:
        if self.model == "constant":
            return f"constant {self.coef[0]:.3g} s"
        x = "log2(w)" if self.model == "log" else "w"
        return f"{self.model}: {self.coef[0]:.3g} s {'+' if self.coef[1] >= 0 else '-'} {abs(self.coef[1]):.3g} s x {x}"


def fit_model(model: ModelName, w: Sequence[float], y: Sequence[float]) -> Fit:
    """Least squares of ``model``; AICc = n ln(RSS/n) + 2k + 2k(k+1)/(n-k-1) with k the
    coefficients plus the variance (infinite when n <= k + 1: too few points to say)."""
    ws, ys = np.asarray(w, dtype=float), np.asarray(y, dtype=float)
    a = design(model, ws)
    coef, *_ = np.linalg.lstsq(a, ys, rcond=None)
    resid = ys - a @ coef
    n = len(ys)
    scale = max(float(np.mean(ys**2)), 1e-18)
    rss = max(float(resid @ resid), RSS_FLOOR * scale * n)
    k = a.shape[1] + 1
    aicc = math.inf if n <= k + 1 else n * math.log(rss / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)
    return Fit(model=model, coef=tuple(float(c) for c in coef), rss=rss, aicc=aicc, n=n)


@dataclass(frozen=True, slots=True)
class Choice:
    """The selected model, the candidates it was chosen among, and why."""

    fit: Fit
    candidates: tuple[Fit, ...]
    reason: str


def choose(w: Sequence[float], y: Sequence[float]) -> Choice:
    """Fit every model and pick one by the rule in the module docstring."""
    sizes = sorted({float(x) for x in w})
    const = fit_model("constant", w, y)
    if len(sizes) < 2:
        return Choice(const, (const,), "one world size only: constant")
    fits = tuple(fit_model(m, w, y) for m in MODELS)
    rising = [f for f in fits[1:] if f.coef[1] >= 0]
    if not rising:
        return Choice(const, fits, "every sloped fit falls with w (a phase is not assumed to speed up): constant")
    sloped = min(rising, key=lambda f: f.aicc)
    if not math.isfinite(sloped.aicc):
        return Choice(const, fits, f"{len(y)} points: too few for AICc of a sloped model, constant")
    gain = const.aicc - sloped.aicc
    if gain > PARSIMONY:
        return Choice(
            sloped, fits, f"AICc {sloped.aicc:.1f} vs constant {const.aicc:.1f} (gain {gain:.1f} > {PARSIMONY:g})"
        )
    return Choice(const, fits, f"best sloped ({sloped.model}) gains {gain:.1f} <= {PARSIMONY:g} AICc: constant")
