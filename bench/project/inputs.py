"""Measured inputs of a projection beyond the failure run: each stack's fault-free tax
and the seconds its checkpoints and restores take per byte of state.

Without them a projection has to assume that resilience is free on fault-free steps and
that every checkpoint write takes ``checkpoint_write_s``, whatever the model. With them:

- the **tax** (a ``resilience-tax`` run): each stack's median fault-free step time over
  plain DDP's, with its bootstrap 95 % interval; the effective training time is divided
  by it (a stack 5 % slower on every step trains 5 % less in the same wall time);
- the **state fits** (a ``state-scaling`` run, :mod:`bench.results.statefit`): seconds =
  a + b x bytes of the phases that move state, per stack; at the state per GPU the
  cluster gives (``model_params`` x ``bytes_per_param`` / ``shard_gpus``, or
  ``state_bytes_per_gpu``) they give the checkpoint write that stalls training (delta,
  the time a save blocks the loop) and replace the measured restore phase.

The band carries their uncertainty by drawing each replicate's tax and slope from a
normal distribution whose 95 % interval is the measured one (the slope held at >= 0:
moving more bytes is not assumed to be faster). A fit is used beyond the largest state
it measured: that is an extrapolation along a straight line, and the output says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.results.reader import Run, resolve
from bench.results.statefit import StateFit, fit_state_phases
from bench.results.tax import strategy_tax
from bench.scenario.config import ConfigError

#: z of a two-sided 95 % interval: a normal's sd is the interval's width / (2 z).
Z95 = 1.959964
#: The sibling runs ``--tax auto`` / ``--state auto`` look for beside the failure run.
TAX_SCENARIO, STATE_SCENARIO = "resilience-tax", "state-scaling"
#: The fits that stand for a checkpoint write (the time a save holds the training loop)
#: and for the restore phase, best first: the strategy's own ``restore`` phase fitted
#: against bytes is what the projection replaces; the bracketed transfer alone
#: (``restore_s``) stands in where that phase was not fitted.
SAVE_PHASES = ("checkpoint_blocked",)
RESTORE_PHASES = ("phase_restore", "restore")


@dataclass(frozen=True, slots=True)
class Band:
    """An estimate with its 95 % interval."""

    value: float
    low: float
    high: float

    def draws(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws of a normal whose 95 % interval is [low, high], centred on value."""
        sd = max(0.0, self.high - self.low) / (2.0 * Z95)
        out: np.ndarray = rng.normal(self.value, sd, size=n) if sd > 0 else np.full(n, self.value)
        return out


@dataclass(frozen=True, slots=True)
class Line:
    """seconds = intercept + slope x bytes, fitted on states up to ``max_bytes``."""

    intercept_s: float
    slope: Band
    """Seconds per byte."""
    max_bytes: float
    phase: str

    def at(self, nbytes: float) -> float:
        return max(0.0, self.intercept_s + self.slope.value * nbytes)

    def draws(self, nbytes: float, rng: np.random.Generator, n: int) -> np.ndarray:
        slopes = np.maximum(0.0, self.slope.draws(rng, n))
        out: np.ndarray = np.maximum(0.0, self.intercept_s + slopes * nbytes)
        return out

    def describe(self, nbytes: float) -> str:
        beyond = f", extrapolated past the {_gb(self.max_bytes)} measured" if nbytes > self.max_bytes else ""
        per_gb = f"{self.slope.value * 1e9:.3g} s/GB [{self.slope.low * 1e9:.3g}–{self.slope.high * 1e9:.3g}]"
        return f"{self.at(nbytes):.3g} s at {_gb(nbytes)} ({self.phase}: {per_gb}{beyond})"


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB"


@dataclass
class Inputs:
    """What was measured for each strategy, and from which runs."""

    tax: dict[str, Band] = field(default_factory=dict)
    save: dict[str, Line] = field(default_factory=dict)
    restore: dict[str, Line] = field(default_factory=dict)
    tax_run: Path | None = None
    state_run: Path | None = None
    notes: list[str] = field(default_factory=list)


def locate(option: str | None, run: Run, scenario: str, flag: str) -> Run | None:
    """The run an option names: ``none`` (or unset, when no sibling exists) for none,
    ``auto`` (the default) for the newest ``scenario`` run beside ``run``'s scenario
    directory, or a path or baseline name."""
    from bench.results.reader import load

    if option == "none":
        return None
    if option in (None, "auto"):
        sibling = run.path.parent.parent / scenario
        try:
            return load(resolve(sibling))
        except ConfigError:
            return None
    try:
        return load(option)
    except ConfigError:
        raise ConfigError(flag, "", f"a {scenario} results directory holding run.json, auto or none", option) from None


def _line(fit: StateFit) -> Line:
    gb = 1e9
    return Line(
        intercept_s=fit.intercept_s,
        slope=Band(fit.s_per_gb / gb, fit.low / gb, fit.high / gb),
        max_bytes=float(fit.max_bytes),
        phase=fit.phase,
    )


def gather(tax_run: Run | None, state_run: Run | None) -> Inputs:
    """The tax per strategy and the state fits per strategy, from the runs given."""
    out = Inputs(tax_run=tax_run.path if tax_run else None, state_run=state_run.path if state_run else None)
    if tax_run is not None:
        for t in strategy_tax(tax_run):
            if not any(math.isnan(x) for x in (t.ratio, t.low, t.high)):
                out.tax[t.strategy] = Band(t.ratio, t.low, t.high)
        if not out.tax:
            out.notes.append(f"{tax_run.path}: no step-time ratio could be measured (no completed trials?)")
    if state_run is not None:
        fits = {(f.strategy, f.phase): f for f in fit_state_phases(state_run.measured())}
        for strategy in sorted({s for s, _ in fits}):
            save = next((fits[strategy, p] for p in SAVE_PHASES if (strategy, p) in fits), None)
            restore = next((fits[strategy, p] for p in RESTORE_PHASES if (strategy, p) in fits), None)
            if save is not None:
                out.save[strategy] = _line(save)
            if restore is not None:
                out.restore[strategy] = _line(restore)
        if not out.save and not out.restore:
            out.notes.append(f"{state_run.path}: no state-moving phase could be fitted")
    return out
