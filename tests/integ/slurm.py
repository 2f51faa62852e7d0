"""The private Slurm cluster the integration tests run jobs on: tools/slurm/localslurm.py.

One implementation serves the tests and the command-line tool (``localslurm.py up``,
``down``, ``lose-node``): a controller and N nodes, each host in network, UTS and mount
namespaces of its own, every file under a work directory, nothing in /etc. Why each part
of it is built the way it is: that module's docstring. tools/ is no package (its scripts
run with Debian's ``python3`` as well as the venv's), so the module is loaded from its file.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "tools" / "slurm" / "localslurm.py"
_NAME = "ftbench_tools_localslurm"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, _PATH)
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _module  # before exec: a dataclass or pickle looks its module up there
    _spec.loader.exec_module(_module)
localslurm = sys.modules[_NAME]

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
    "localslurm",
]
