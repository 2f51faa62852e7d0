"""A pytest session of its own, for the tests of ftbench's pytest plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def child_pytest(tmp_path: Path, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Run pytest in ``tmp_path``, loading the plugin through its pytest11 entry point.

    The child gets none of the parent's ``PYTEST_XDIST_*`` variables: run from an xdist
    worker (``pytest -n``), pytest-benchmark would see ``PYTEST_XDIST_WORKER``, take the
    child for a worker and write no benchmark file.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", str(tmp_path)]
        + list(args),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
