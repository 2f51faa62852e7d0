"""Which NVIDIA Resiliency Extension (NVRx) is installed: shared by ``nvrx-inprocess``
and ``nvrx-launcher``. No torch import here: the harness asks before any trial."""

from __future__ import annotations

import importlib.metadata
import importlib.util

from bench.scenario.strategy import Package

DISTRIBUTION = "nvidia-resiliency-ext"
PACKAGE = "nvidia_resiliency_ext"
NVRX = Package(column="nvrx", module=PACKAGE, dists=(DISTRIBUTION,))
"""What runs record of it (the ``nvrx`` column)."""


def nvrx_version() -> str | None:
    """The installed distribution's version, or None when the package is not importable."""
    if importlib.util.find_spec(PACKAGE) is None:
        return None
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def nvrx_unavailable() -> str | None:
    """Why an NVRx strategy cannot run here (the package is missing), or None."""
    if nvrx_version() is None:
        return f"{PACKAGE} is not importable here: pip install 'ftbench[nvrx]'"
    return None
