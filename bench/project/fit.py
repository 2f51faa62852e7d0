"""Which recovery phases grow with the job: a model per phase, chosen by a stated rule.

A phase measured at a few world sizes (2, 4, 8 ranks on one machine) is fitted by
least squares with three candidate models of the world size ``w``:

- ``constant``:    y = a
- ``log``:         y = a + b * log2(w)   (tree-shaped collectives, a store's fan-in)
- ``linear``:      y = a + b * w         (a coordinator that talks to every rank in turn)

Every trial's value is a data point (not the per-size median), so the fit sees the
spread. The rule (:func:`bench.scale.growth.choose`, shared with ``ftbench scale``): the
model with the lowest small-sample AIC (AICc, Gaussian errors, ``k`` counting the noise
variance too) wins, but a model with a slope must beat ``constant`` by more than
:data:`PARSIMONY` AICc units, and a model whose slope is negative is not a candidate (a
phase is not assumed to get faster as the job grows: extrapolated, a falling line would
remove the phase altogether); with fewer than two world sizes or too few points for
AICc, the phase is ``constant``. The choice is made once on all the data; the
uncertainty of the chosen model's parameters is carried by the caller
(:mod:`bench.project.model`) by refitting it on bootstrap resamples of the trials.

``n log n`` and quadratic growth (:data:`bench.scale.growth.ALL`) are candidates for the
control-plane curves ``ftbench scale`` measures over three orders of magnitude of
participants, not here: three world sizes cannot tell a curve of that kind from a line.

Extrapolating from 8 ranks to 100,000 GPUs is four orders of magnitude: the band a
bootstrap gives is the uncertainty of the slope, not a guarantee that the model form
holds that far. ``docs/project.md`` says so; the CLI prints the chosen model beside
every figure, and phases that are control-plane work take their growth from a scale
run instead where there is one (:mod:`bench.project.control`).
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.scale.growth import PARSIMONY, RSS_FLOOR, Choice, Fit, ModelName, basis, design, fit_model
from bench.scale.growth import choose as _choose

MODELS: tuple[ModelName, ...] = ("constant", "log", "linear")

__all__ = ["MODELS", "PARSIMONY", "RSS_FLOOR", "Choice", "Fit", "ModelName", "basis", "choose", "design", "fit_model"]


def choose(w: Sequence[float], y: Sequence[float]) -> Choice:
    """Fit every model of :data:`MODELS` (unweighted) and pick one by the shared rule."""
    return _choose(w, y, models=MODELS)
