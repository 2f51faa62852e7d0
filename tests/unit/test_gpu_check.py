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


# --- the one-GPU run (bench/onegpu) ---------------------------------------------------


def _wheels_here() -> None:
    """The carried wheels, fetched as `make gpu-wheels` does if they are not here yet (a
    fresh clone); without a package index the wheel checks cannot run, and say so."""
    from bench.onegpu import wheels

    if wheels.check().ok:
        return
    try:
        wheels.fetch(progress=lambda _line: None)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
        pytest.skip(f"the pinned wheels are not in .whl/ and could not be fetched: {err}")


@pytest.mark.timeout(120)
def test_the_one_gpu_dry_run_checks_every_point_the_wheels_and_the_budget(tmp_path: Path) -> None:
    _wheels_here()
    done = subprocess.run(
        [str(ROOT / "tools" / "gpu-check.sh"), "--one-gpu", "--dry-run", str(tmp_path / "out")],
        env=dict(os.environ, FTBENCH_PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "dry run: ok" in out
    for scenario in (
        "gpu-recovery: 5 point(s)",
        "gpu-checkpoints: 8 point(s)",
        "gpu-tax: 7 point(s), 6 on the GPU image",
    ):
        assert scenario in out
    assert "strategy=torch-reconfigure: ddp x2 on gloo/cuda, 3 trial(s); skipped on the image" in out
    assert "checked against CPython 3.12 on manylinux x86-64" in out and "of 64 MiB" in out
    assert not (tmp_path / "out").exists(), "a dry run writes nothing"


@pytest.mark.parametrize(
    ("filename", "fits"),
    [
        ("nvidia_resiliency_ext-0.4.1-cp312-cp312-manylinux_2_31_x86_64.whl", True),
        ("protobuf-7.36.2-cp310-abi3-manylinux2014_x86_64.whl", True),
        ("py_spy-0.4.3-py2.py3-none-manylinux1_x86_64.manylinux_2_5_x86_64.whl", True),
        ("defusedxml-0.7.1-py2.py3-none-any.whl", True),
        ("nvidia_resiliency_ext-0.4.1-cp311-cp311-manylinux_2_31_x86_64.whl", False),  # another Python
        ("x-1.0-cp312-cp312-manylinux_2_40_x86_64.whl", False),  # a newer glibc than the image's
        ("x-1.0-cp312-cp312-manylinux_2_17_aarch64.whl", False),
        ("x-1.0-cp312-cp312-macosx_11_0_arm64.whl", False),
    ],
)
def test_a_wheel_fits_the_image_by_its_tags(filename: str, fits: bool) -> None:
    from bench.onegpu.wheels import matches_image

    assert matches_image(filename) is fits


def _wheel(directory: Path, name: str, version: str, *requires: str, tag: str = "py3-none-any") -> Path:
    """A real (tiny) wheel: its file name and its METADATA are what the check reads."""
    import zipfile

    path = directory / f"{name}-{version}-{tag}.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}-{version}.dist-info/METADATA", meta)
    return path


def test_the_wheel_check_finds_what_would_fail_on_the_machine(tmp_path: Path) -> None:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from bench.onegpu.wheels import check

    pinned = {canonicalize_name(r.split("==")[0]): Requirement(r) for r in ("alpha==1.0", "beta==2.0", "gamma==3.0")}
    _wheel(tmp_path, "alpha", "1.0", "beta>=2", "numpy", "torch>=2.7", "missing-pkg")
    _wheel(tmp_path, "beta", "2.0", "torch>=2.14")  # the image has 2.11
    _wheel(tmp_path, "beta", "2.1")  # a second version: pip would install none
    _wheel(tmp_path, "delta", "1.0")  # not pinned
    _wheel(tmp_path, "epsilon", "1.0", tag="cp311-cp311-manylinux_2_17_x86_64")
    problems = "\n".join(check(tmp_path, pinned).problems)
    assert "alpha needs missing-pkg: neither carried nor on the image" in problems
    assert "beta needs torch>=2.14; the image has torch 2.11.0" in problems
    assert "beta: 2 wheels" in problems
    assert "gamma==3.0: no wheel" in problems
    assert "delta-1.0-py3-none-any.whl: not pinned" in problems
    assert "epsilon-1.0-cp311-cp311-manylinux_2_17_x86_64.whl: no tag for CPython 3.12" in problems
    assert "numpy" not in problems and "torch>=2.7" not in problems  # the image has them


def test_a_point_the_sweep_leaves_out_unexpectedly_fails_the_plan() -> None:
    from dataclasses import replace

    from bench.onegpu import plan

    recovery = plan.SECTIONS[0]
    assert plan.check_section(recovery).problems == []
    strict = replace(recovery, left_out=frozenset())
    (problem,) = plan.check_section(strict).problems
    assert "kind=transformer strategy=torchft" in problem and "hsdp" in problem
    late = replace(plan.SECTIONS[2], image_skips=frozenset())
    assert any("torch-reconfigure" in p for p in plan.check_section(late).problems)


def test_each_section_ends_where_the_later_ones_still_fit() -> None:
    from bench.onegpu import plan

    ends = plan.deadlines()
    assert ends == sorted(ends) and ends[-1] == plan.END_S - plan.RESERVE_S <= plan.WALL_S
    for i, section in enumerate(plan.SECTIONS[1:], 1):
        assert ends[i] - ends[i - 1] == section.budget_s
    assert plan.check_plan() == []


def test_the_pack_leaves_checkpoints_out_and_fits_what_comes_back(tmp_path: Path) -> None:
    import tarfile

    from bench.onegpu.drive import newest_run, pack

    run = tmp_path / "runs" / "gpu-checkpoints" / "20261207T000000Z_abc"
    trial = run / "events" / "p" / "0"
    trial.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (trial / "rank0-1.jsonl").write_text("{}\n")
    (trial / "rank0-1.log").write_text("console\n")
    ckpt = run / "events" / "p" / "ckpt-0"
    ckpt.mkdir()
    (ckpt / "latest.pt").write_bytes(b"\0" * 4096)
    said: list[str] = []
    pack(tmp_path / "runs", tmp_path / "runs.tar.gz", said.append)
    with tarfile.open(tmp_path / "runs.tar.gz") as tar:
        names = tar.getnames()
    assert "runs/gpu-checkpoints/20261207T000000Z_abc/events/p/0/rank0-1.jsonl" in names
    assert "runs/gpu-checkpoints/20261207T000000Z_abc/events/p/0/rank0-1.log" in names
    assert not any("ckpt-" in n for n in names)
    assert newest_run(tmp_path / "runs" / "gpu-checkpoints") == run
    assert said and said[0].startswith("packed runs.tar.gz")
