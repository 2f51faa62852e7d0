"""A point's ``launch.env``: the requirements of the environment its trials run in.

Validated with the scenario (``ftbench validate`` refuses a spec that is not one) and
parsed the same way where the environment is built (:mod:`bench.procs.venvs`) and where
runs are split by environment (:mod:`bench.results.envcompare`).
"""

from __future__ import annotations

import functools
import importlib.metadata
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


def torch_of(spec: str) -> tuple[str, str] | None:
    """The torch a point of ``launch.env = spec`` runs and where that was read (see
    :func:`version_of`)."""
    return version_of(spec, ("torch",))


@functools.lru_cache(maxsize=256)
def version_of(spec: str, dists: tuple[str, ...]) -> tuple[str, str] | None:
    """The version of a distribution (any of ``dists``) a point of ``launch.env = spec``
    runs and where that was read: the version the spec pins (``NAME==X``), else the
    harness's own; None where it is not known before the environment is built (a range)
    or it is not installed.

    Cached: reading an installed distribution's metadata costs about 1.5 ms, paid by
    every point of a sweep (``validate`` of 3,600 points spent most of its time here),
    and neither the spec nor the harness's own installation changes within a process."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    names = {canonicalize_name(d) for d in dists}
    for text in parse(spec):
        req = Requirement(text)
        if canonicalize_name(req.name) in names:
            pins = [s.version for s in req.specifier if s.operator == "=="]
            return (pins[0], "pinned by launch.env") if len(req.specifier) == 1 and pins else None
    for dist in dists:
        try:
            return importlib.metadata.version(dist), "installed here"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
