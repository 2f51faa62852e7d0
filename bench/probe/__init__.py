"""Watching a job ftbench did not write (``workload.kind = "command"``).

Layer: the bottom, beside :mod:`bench.scenario` (it imports nothing of ftbench), so that
the launchers' instrumentation (:mod:`bench.jobs.elastic`) and the command job
(:mod:`bench.strategies.command`) share it.

``site/`` is what goes into the job's interpreters (:mod:`bench.probe.site.ftbench_probe`,
started by the ``sitecustomize`` beside it); :func:`environment` is how a job is given it.
"""

from __future__ import annotations

import os
from pathlib import Path

SITE = Path(__file__).resolve().parent / "site"
"""The folder put first on the job's ``PYTHONPATH``: part of ftbench's installed code,
never a writable place of the run's."""


def environment(events_dir: str | Path, env: dict[str, str], *, rank_base: int = 0) -> dict[str, str]:
    """``env`` with the probe switched on for every Python process started from it;
    ``rank_base`` is added to the ``RANK`` they carry (several launchers of one job)."""
    from bench.probe.site.ftbench_probe import DIR_ENV, OWNER_ENV, RANK_BASE_ENV

    path = env.get("PYTHONPATH", "")
    out = {k: v for k, v in env.items() if k not in (OWNER_ENV, RANK_BASE_ENV)}
    out["PYTHONPATH"] = os.pathsep.join([str(SITE), *([path] if path else [])])
    out[DIR_ENV] = str(events_dir)
    if rank_base:
        out[RANK_BASE_ENV] = str(rank_base)
    return out
