"""``ftbench validate`` stays linear and cheap in the number of points of a sweep.

Bounded in work, not in wall time (which depends on the machine and its load): the
Python function calls that validating and listing a sweep makes, counted with a
profile hook. A 3,600-point sweep (60 seeds x 60 step counts of kill-one-rank) once
spent about 3 ms a point, most of it reading installed packages' metadata again for
every point and validating every point twice; each point now costs a bounded number of
calls, the same at 60 points as at 960, and none of them reads a package's metadata.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from types import FrameType
from typing import Any

from bench.scenario.loader import expand, parse, stack_gap

ROOT = Path(__file__).resolve().parents[2]
#: Python function calls per point of validating, listing and checking a sweep's points
#: (about 1,100 measured when this was written; 13,700 before, most of them reading package metadata).
CALLS_PER_POINT = 2000


def sweep(seeds: int, steps: int) -> dict[str, Any]:
    raw = tomllib.loads((ROOT / "scenarios" / "kill-one-rank.toml").read_text())
    raw["sweep"] = {"measure.seed": list(range(seeds)), "workload.steps": [100 + 10 * i for i in range(steps)]}
    return raw


def calls(raw: dict[str, Any]) -> tuple[int, dict[str, int]]:
    """Function calls made by what ``ftbench validate`` does with a scenario, and how
    often a few named functions were among them."""
    count = 0
    named: dict[str, int] = {"_validate": 0, "version": 0, "metadata": 0}

    def hook(frame: FrameType, event: str, arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1
            name = frame.f_code.co_name if event == "call" else getattr(arg, "__name__", "")
            if name in named and event == "call":
                named[name] += 1

    sys.setprofile(hook)
    try:
        scenario = parse(raw, file="<sweep>")
        pts, _ = expand(scenario)
        gaps = [stack_gap(p.scenario) for p in pts]
    finally:
        sys.setprofile(None)
    assert len(pts) == len(gaps)
    return count, named


def test_validating_a_sweep_costs_a_bounded_linear_amount_per_point() -> None:
    calls(sweep(2, 2))  # imports, registries and caches filled once, outside the count
    small, named_small = calls(sweep(6, 10))  # 60 points
    large, named_large = calls(sweep(24, 40))  # 960 points
    per_point = (large - small) / (960 - 60)
    assert per_point <= CALLS_PER_POINT, f"{per_point:.0f} calls a point"
    # Linear: the large sweep costs what its points cost, nothing that grows faster.
    assert large <= 960 * CALLS_PER_POINT
    assert abs(large / 960 - small / 60) <= 0.25 * per_point + 50
    # Each point is validated once (parse), not again when listed, and the installed
    # packages' metadata is not read per point.
    assert named_large["_validate"] - named_small["_validate"] == 960 - 60
    assert named_large["metadata"] == named_small["metadata"] == 0
