"""The one-GPU run itself: each section under its deadline, then the summary and the pack.

A section is one ``ftbench run`` of its scenario, a child process in a session of its
own. At the section's deadline (:func:`bench.onegpu.plan.deadlines`) it gets SIGTERM,
which ends the current trial cleanly and keeps the finished ones, then
:data:`~bench.onegpu.plan.GRACE_S` to go, then SIGKILL for its whole session and a
``ftbench cleanup``. Whatever happened, the summary is written and the run directories
are packed (checkpoint files left out: gigabytes, and nothing a figure reads), so a
lease cut short still brings back what finished.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from bench.onegpu import plan
from bench.onegpu.plan import Section
from bench.onegpu.summary import Outcome, render

STARTED_ENV = "FTBENCH_ONEGPU_STARTED"
"""The command's start (Unix seconds), set by tools/gpu-check.sh before it installs
anything: the budget counts the install too."""


def run(out: Path, *, python: str, rehearse: bool = False, scale: float = 1.0) -> int:
    """Run every section into ``out``; 0 once the summary and the pack are written."""
    started = float(os.environ.get(STARTED_ENV) or time.time())
    t0 = time.monotonic() - max(0.0, time.time() - started)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ftbench-onegpu-"))
    with open(out / "gpu-check.log", "a", buffering=1) as log:

        def say(line: str) -> None:
            stamp = f"[{time.monotonic() - t0:6.1f} s] {line}"
            print(stamp, flush=True)  # noqa: T201  (the command's own progress)
            log.write(stamp + "\n")

        environment(out / "environment.txt", python)
        say(f"one-GPU run{' (CPU rehearsal)' if rehearse else ''}: {len(plan.SECTIONS)} sections into {out}")
        outcomes = []
        for section, deadline in zip(plan.SECTIONS, plan.deadlines(scale=scale), strict=True):
            sets = section.rehearsal if rehearse else ()
            outcomes.append(_section(section, sets, t0 + deadline, work / "runs", python, log, say, scale))
        say("writing the summary")
        header = _header(python, started, rehearse)
        try:
            text = render(outcomes, header)
        except Exception:  # the pack and the log still come back
            text = "# ftbench on one GPU: the summary failed\n\n```\n" + traceback.format_exc() + "```\n"
            say("the summary failed; its traceback is in summary.md")
        (out / "summary.md").write_text(text)
        pack(work / "runs", out / "runs.tar.gz", say)
        shutil.rmtree(work, ignore_errors=True)  # checkpoints: gigabytes on the machine's disk
        say(f"done in {time.monotonic() - t0:.0f} s (budget {plan.WALL_S * scale:.0f} s)")
    too_big = [p.name for p in out.iterdir() if p.is_file() and p.stat().st_size > plan.MAX_FILE_BYTES]
    if len(list(out.iterdir())) > plan.MAX_FILES or too_big:
        print(f"gpu-check: {out} holds more than will come back: {too_big or 'too many files'}")  # noqa: T201
        return 1
    return 0


def _section(
    section: Section,
    sets: tuple[str, ...],
    deadline: float,
    runs: Path,
    python: str,
    log: IO[str],
    say: Callable[[str], None],
    scale: float,
) -> Outcome:
    left = deadline - time.monotonic()
    if left < plan.MIN_START_S * scale:
        say(f"{section.name}: not started, {max(left, 0):.0f} s left of its slice")
        return Outcome(section, None, f"not started: {max(left, 0):.0f} s left of its slice", 0.0)
    say(f"{section.name}: ftbench run {section.scenario}, {left:.0f} s until its deadline")
    argv = [python, "-m", "bench", "run", section.scenario, "--out", str(runs)]
    argv += [arg for s in sets for arg in ("--set", s)]
    start = time.monotonic()
    env = child_environment()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    status = "complete"
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        say(f"{section.name}: its slice is spent: SIGTERM (the trial in flight ends, finished ones are kept)")
        status = "stopped at its budget"
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=plan.GRACE_S * scale)
        except subprocess.TimeoutExpired:
            say(f"{section.name}: still running after {plan.GRACE_S * scale:.0f} s: SIGKILL, then ftbench cleanup")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            subprocess.run(
                [python, "-m", "bench", "cleanup"], stdout=log, stderr=subprocess.STDOUT, env=env, timeout=60
            )
    if status == "complete" and proc.returncode != 0:
        status = f"failed (exit {proc.returncode})"
    wall = time.monotonic() - start
    made = newest_run(runs / section.scenario)
    say(f"{section.name}: {status} after {wall:.0f} s; run {made}")
    return Outcome(section, made, status, wall)


def child_environment() -> dict[str, str]:
    """The sections' environment. ``PYTORCH_NVML_BASED_CUDA_CHECK``: torch asks NVML,
    not the CUDA runtime, whether a GPU is there, so that no process initialises CUDA
    before the forkserver forks ranks from it (a forked child of such a process cannot
    use CUDA). Bytecode is cached (``PYTHONDONTWRITEBYTECODE`` unset): every rank of every
    trial imports the same modules."""
    env = dict(os.environ, PYTORCH_NVML_BASED_CUDA_CHECK="1", PYTHONUNBUFFERED="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def newest_run(directory: Path) -> Path | None:
    """The newest run directory of a scenario's results folder, if any."""
    if not directory.is_dir():
        return None
    made = [p for p in directory.iterdir() if p.is_dir() and (p / "run.json").exists()]
    return max(made, key=lambda p: p.stat().st_mtime, default=None)


def pack(runs: Path, archive: Path, say: Callable[[str], None]) -> None:
    """The run directories into one gzipped tar, checkpoint folders left out; over the
    size that comes back, the ranks' console logs are left out too, and if still over
    the archive is removed and the log says so."""
    if not runs.is_dir():
        say("no run directory to pack")
        return
    for logs in (True, False):
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(runs, arcname="runs", filter=_keep if logs else _keep_no_logs)
        size = archive.stat().st_size
        if size <= plan.MAX_FILE_BYTES:
            say(f"packed {archive.name}: {size / 2**20:.1f} MiB" + ("" if logs else " (console logs left out)"))
            return
    archive.unlink()
    say(f"the packed runs are over {plan.MAX_FILE_BYTES / 2**20:.0f} MiB even without console logs: not kept")


def _keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Everything but checkpoint folders (``ckpt-*`` of a trial)."""
    return None if Path(info.name).name.startswith("ckpt-") else info


def _keep_no_logs(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """As :func:`_keep`, and no console logs (``*.log``) either."""
    return None if info.isfile() and info.name.endswith(".log") else _keep(info)


def environment(path: Path, python: str) -> None:
    """What the run ran on: the GPU as nvidia-smi lists it, the interpreter, torch and
    CUDA, the carried packages' versions."""
    probe = (
        "import importlib.metadata as m, torch, json; print(json.dumps({"
        "'torch': torch.__version__, 'cuda': torch.version.cuda, 'cuda_available': torch.cuda.is_available(), "
        "'device': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "
        "'packages': {d.metadata['Name']: d.version for d in m.distributions()}}, sort_keys=True, indent=1))"
    )
    parts = [f"python: {python} ({platform.python_version()} here)"]
    for argv in (["nvidia-smi"], ["nvidia-smi", "-L"], [python, "-c", probe]):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=child_environment())
            parts.append(f"$ {' '.join(argv[:2])}\n{done.stdout}{done.stderr}")
        except (OSError, subprocess.TimeoutExpired) as err:
            parts.append(f"$ {' '.join(argv[:2])}\n{err}")
    path.write_text("\n".join(parts))


def _header(python: str, started: float, rehearse: bool) -> dict[str, Any]:
    probe = (
        "import torch, platform; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'); "
        "print(torch.__version__); print(platform.python_version())"
    )
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120, env=child_environment())
    device, torch_version, python_version = ([*done.stdout.split("\n"), "?", "?", "?"])[:3]
    from bench.procs.machine import commit

    return {
        "device": device + (" (CPU rehearsal: every device set to cpu)" if rehearse else ""),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "torch": torch_version,
        "python": python_version,
        "commit": commit(),
        "ranks": "2 per point, on the CPU"
        if rehearse
        else "2 per point, sharing the one GPU over gloo with CUDA tensors",
    }
