"""The private Slurm cluster the integration tests run jobs on: tools/slurm/localslurm.py.

One implementation serves the tests and the command-line tool (``localslurm.py up``,
``down``, ``lose-node``): a controller and N nodes, each host in network, UTS and mount
namespaces of its own, every file under a work directory, nothing in /etc. Why each part
of it is built the way it is: that module's docstring. tools/ is no package (its scripts
run with Debian's ``python3`` as well as the venv's), so its modules are loaded from their
files, under the names the scripts import each other by.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools" / "slurm"


def load_tool(name: str) -> ModuleType:
    """``tools/slurm/NAME.py`` as module ``NAME`` (once; the scripts import their siblings
    by these names: localslurm is slurmcluster, slurmstart, slurmconf and slurmprocs)."""
    if str(TOOLS) not in sys.path:
        sys.path.append(str(TOOLS))
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before exec: a dataclass or pickle looks its module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


localslurm = load_tool("localslurm")
LocalSlurm = localslurm.LocalSlurm
SlurmUnavailable = localslurm.SlurmUnavailable
FINAL_STATES = localslurm.FINAL_STATES
SLURM_DEFAULT_TIMERS = localslurm.SLURM_DEFAULT_TIMERS
TEST_TIMERS = localslurm.TEST_TIMERS
leftover_namespaces = localslurm.leftover_namespaces

__all__ = [
    "FINAL_STATES",
    "SLURM_DEFAULT_TIMERS",
    "TEST_TIMERS",
    "LocalSlurm",
    "SlurmUnavailable",
    "leftover_namespaces",
    "load_tool",
    "localslurm",
    "started",
]


def started(cluster: Any) -> Iterator[Any]:
    """A fixture's body: ``cluster`` started (the test skips, saying why, where Slurm
    cannot run), then torn down, raising if anything was left behind."""
    try:
        cluster.start()
    except SlurmUnavailable as e:
        pytest.skip(str(e))
    try:
        yield cluster
    finally:
        cluster.__exit__(None, None, None)
