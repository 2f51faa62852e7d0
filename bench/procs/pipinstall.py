"""pip, as the environments of ``--env`` run it: constraints set aside, output streamed.

An environment's requirements are pinned by the user's spec, so its ``pip install`` runs
with ``PIP_CONSTRAINT`` pointing at an empty file inside the environment: a cap in pip's
configuration (``constraint = ...``, such as ``torch<=2.14.1``) is set aside. pip's
output is streamed, the lines that matter passed on with the elapsed time, so that a
several-minute install of a CUDA build of torch is seen to be alive.
"""

from __future__ import annotations

import ast
import collections
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

BUILD_TIMEOUT_S = 1800.0
"""A CUDA build of torch is several GB: installing it can take minutes."""
NO_CONSTRAINTS = "ftbench-no-constraints.txt"
"""The empty constraints file, inside the environment, that its pip calls get as
``PIP_CONSTRAINT`` in place of the configured one."""
SHOWN = (
    "Collecting",
    "Downloading",
    "Processing",
    "Installing collected packages",
    "Successfully installed",
    "ERROR",
)
"""pip's output lines passed on to the progress (the rest is kept for an error message)."""
SHOWN_CHARS = 150
HEARTBEAT_S = 30.0
"""Silence after which the progress says the install is still running (pip says
nothing while it unpacks a multi-GB wheel)."""


class EnvBuildError(RuntimeError):
    """An environment could not be built or used; the message says why."""


def pip_install(
    path: Path, reqs: list[str], base: Mapping[str, str] | None = None, *, hide: tuple[str, ...] = ()
) -> tuple[list[str], dict[str, str]]:
    """The pip call that installs ``reqs`` into the environment at ``path``, and its
    environment variables: output streamed without a progress bar, and ``PIP_CONSTRAINT``
    on an empty file of the environment's, which sets aside any configured constraint."""
    empty = path / NO_CONSTRAINTS
    empty.write_text("")
    argv = [str(path / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    argv += ["--progress-bar", "off", *reqs]
    env = dict(os.environ if base is None else base, PIP_CONSTRAINT=str(empty), PYTHONUNBUFFERED="1")
    for name in hide:  # variables that would show pip other packages than the environment's
        env.pop(name, None)
    return argv, env


def configured_constraints(python: str) -> str | None:
    """The constraint files pip's configuration gives ``pip install`` of ``python``, as
    configured, or None: ``PIP_CONSTRAINT``, else an ``[install]`` section's, else a
    ``[global]`` one's (pip's own order: the first that is set wins)."""
    try:
        done = subprocess.run(
            [python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        done = None
    if done is None or done.returncode != 0:  # no answer: the variable at least
        return os.environ.get("PIP_CONSTRAINT", "").strip() or None
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        name, _, value = line.partition("=")
        section, _, option = name.rpartition(".")
        if option != "constraint":
            continue
        try:
            value = str(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            value = value.strip("'\"")
        found.setdefault(section, " ".join(value.split()))
    return next((found[s] for s in (":env:", "install", "global") if found.get(s)), None)


def shown(line: str, elapsed: float) -> str | None:
    """A line of pip's output as the progress shows it (elapsed seconds first,
    truncated), or None for one it does not."""
    text = line.strip()
    if not text.startswith(SHOWN):
        return None
    if len(text) > SHOWN_CHARS:
        text = text[: SHOWN_CHARS - 3] + "..."
    return f"    [{elapsed:4.0f}s] {text}"


def stream(
    argv: list[str],
    *,
    env: Mapping[str, str],
    what: str,
    progress: Callable[[str], None],
    timeout: float = BUILD_TIMEOUT_S,
    heartbeat: float = HEARTBEAT_S,
) -> None:
    """Run ``argv``, passing the lines of its output that matter to ``progress`` (and a
    line after each ``heartbeat`` of silence); EnvBuildError with its last output if it
    fails, or if it is still running after ``timeout``."""
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=dict(env),
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    tail: collections.deque[str] = collections.deque(maxlen=40)
    last = start
    try:
        while True:
            now = time.monotonic()
            if now - start > timeout:
                raise EnvBuildError(f"could not {what}: no answer within {timeout:.0f} s")
            try:
                line = lines.get(timeout=min(1.0, heartbeat))
            except queue.Empty:
                if time.monotonic() - last >= heartbeat:
                    last = time.monotonic()
                    latest = (tail[-1] if tail else what)[:80]
                    progress(f"    [{last - start:4.0f}s] ... still running (last: {latest})")
                continue
            if line is None:
                break
            tail.append(line.rstrip())
            out = shown(line, time.monotonic() - start)
            if out is not None:
                progress(out)
                last = time.monotonic()
        code = proc.wait(timeout=max(1.0, timeout - (time.monotonic() - start)))
    except subprocess.TimeoutExpired:
        raise EnvBuildError(f"could not {what}: no answer within {timeout:.0f} s") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
    if code != 0:
        text = "\n".join(line for line in tail if line.strip())
        raise EnvBuildError(f"could not {what}: {text[-500:]}")
