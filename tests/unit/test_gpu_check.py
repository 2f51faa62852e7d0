"""``tools/gpu-check.sh --dry-run``: the NCCL points of torch 2.15 validate, are listed,
and the script says whether this machine can run them (here: no, and why)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_the_dry_run_lists_the_points_and_says_why_not_here() -> None:
    done = subprocess.run(
        [str(ROOT / "tools" / "gpu-check.sh"), "--dry-run"],
        env=dict(os.environ, FTBENCH_PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr
    assert "nccl-backends, 12 point(s)" in done.stdout
    assert "use_nccl2=True" in done.stdout and "use_nccl2=False" in done.stdout
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < 2:
        assert f"gpu-check: {gpus} GPU(s) visible here; these points need 2" in done.stdout
    else:
        assert "would run 'ftbench run nccl-backends --trials 3'" in done.stdout


def test_a_point_on_fewer_gpus_than_ranks_is_skipped_saying_why() -> None:
    import torch

    from bench.procs.machine import resolve_backend

    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs: nothing is refused")
    with pytest.raises(RuntimeError, match="NCCL refuses two ranks of a communicator on one GPU"):
        resolve_backend("nccl", 2)
