"""The harness-cost benchmark's stopping rule and projection (``make bench``), on rounds
made up here: what the rule decides must follow from the rounds' spread alone."""

from __future__ import annotations

import math

from bench.calibrate.harness_cost import (
    TARGET_WIDTH,
    Measured,
    Round,
    keep_going,
    paired,
    resolved,
    rounds_to_resolve,
)


def _rounds(ratios: list[float]) -> list[Round]:
    """Rounds whose ftbench run takes ``ratio`` times the bare run's step time."""
    return [
        {
            "bare": Measured(step_s=0.010, cpu_step_s=0.010),
            "ftbench": Measured(step_s=0.010 * r, cpu_step_s=0.010 * r),
            "interposed": Measured(step_s=0.010 * r, cpu_step_s=0.010 * r),
        }
        for r in ratios
    ]


TIGHT = _rounds([1.030, 1.031, 1.029, 1.030, 1.032, 1.028, 1.030, 1.031, 1.029])
WIDE = _rounds([0.99, 1.12, 1.03, 1.08, 0.97, 1.05, 1.15, 1.01, 1.06])


def test_a_tight_spread_is_resolved_and_a_wide_one_is_not() -> None:
    assert paired(TIGHT, "ftbench", "step_s").width <= TARGET_WIDTH
    assert resolved(TIGHT)
    assert paired(WIDE, "ftbench", "step_s").width > TARGET_WIDTH
    assert not resolved(WIDE)


def test_the_projection_scales_with_the_square_of_the_width() -> None:
    width = paired(WIDE, "ftbench", "step_s").width
    assert rounds_to_resolve(WIDE) == math.ceil(len(WIDE) * (width / TARGET_WIDTH) ** 2)
    assert rounds_to_resolve(WIDE) > len(WIDE)
    # resolved already: no more rounds than it has
    assert rounds_to_resolve(TIGHT) == len(TIGHT)
    # no rounds, no interval: nothing to project from
    assert rounds_to_resolve([]) == 0


def test_rounds_go_on_until_the_count_then_while_unresolved_and_within_budget() -> None:
    # the count comes first, whatever the budget
    assert keep_going(WIDE[:3], count=9, budget_s=0.0, spent_s=100.0)
    assert keep_going(TIGHT[:3], count=9, budget_s=0.0, spent_s=100.0)
    # after it: a resolved ratio stops, however much budget is left
    assert not keep_going(TIGHT, count=9, budget_s=3600.0, spent_s=90.0)
    # an unresolved one goes on while one more average round fits the budget
    assert keep_going(WIDE, count=9, budget_s=100.0, spent_s=90.0)
    assert not keep_going(WIDE, count=9, budget_s=99.0, spent_s=90.0)
    # no budget: exactly the count
    assert not keep_going(WIDE, count=9, budget_s=0.0, spent_s=90.0)
