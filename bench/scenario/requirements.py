"""A point's ``launch.env``: the requirements of the environment its trials run in.

Validated with the scenario (``ftbench validate`` refuses a spec that is not one) and
parsed the same way where the environment is built (:mod:`bench.procs.venvs`) and where
runs are split by environment (:mod:`bench.results.envcompare`).
"""

from __future__ import annotations

import re

#: One requirement: a distribution name with an optional version clause; no URLs, paths
#: or options (a spec names packages of the configured index, nothing else).
REQUIREMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?((===?|[<>!~]=|[<>])[A-Za-z0-9.*+!_-]+)?")


def parse(spec: str) -> list[str]:
    """The requirements of a spec, sorted, or ValueError naming the one that is not one."""
    reqs = spec.split()
    for r in reqs:
        if not REQUIREMENT.fullmatch(r):
            raise ValueError(f"{r!r} is not a requirement of the form NAME[==VERSION] (no URLs, paths or options)")
    return sorted(reqs)
