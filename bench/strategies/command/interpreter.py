"""The job's own interpreter: which Python a command job runs in, and what it has.

A command job's versions are its interpreter's, not the harness's: the run records the
torch, torchft and NVRx that interpreter imports, and a point whose job needs a package
its interpreter lacks (``workload.requires``) is skipped with the reason instead of
failing each trial. The interpreter is the first command's program that is a Python,
or the Python a script's ``#!`` line names (``torchrun``, ``ft_launcher``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from bench.workloads.command import CommandParams, fixed, program

_ASKED: dict[tuple[str, tuple[str, ...]], dict[str, str]] = {}

_ASK = (
    "import importlib.metadata as m, json, sys\n"
    "def v(name):\n"
    "    try:\n"
    "        return m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        return ''\n"
    "print(json.dumps({'python': sys.version.split()[0], **{n: v(n) for n in sys.argv[1:]}}))\n"
)
STACK = ("torch", "torchft", "torchft-nightly", "nvidia-resiliency-ext")
"""The distributions every run records of the job's interpreter."""


def installed(python: str, names: tuple[str, ...]) -> dict[str, str]:
    """Distribution -> version in ``python``'s environment ("" where missing); asked once."""
    key = (python, names)
    if key not in _ASKED:
        try:
            out = subprocess.run(
                [python, "-c", _ASK, *names], capture_output=True, text=True, timeout=60, check=True
            ).stdout
            _ASKED[key] = {k: str(v) for k, v in json.loads(out.strip().splitlines()[-1]).items()}
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            _ASKED[key] = {}
    return dict(_ASKED[key])


def interpreter_versions(params: CommandParams, base: str) -> dict[str, Any]:
    """The versions the job's interpreter has, in trials.csv's columns."""
    python = job_interpreter(params, base)
    if python is None:
        return {}
    found = installed(python, STACK)
    out = {
        "python": found.get("python", ""),
        "torch": found.get("torch", ""),
        "torchft": found.get("torchft") or found.get("torchft-nightly", ""),
        "nvrx": found.get("nvidia-resiliency-ext", ""),
    }
    return {k: v for k, v in out.items() if v}


_FIND = (
    "import importlib.util, json, sys\n"
    "print(json.dumps([n for n in sys.argv[1:] if importlib.util.find_spec(n) is None]))\n"
)


def missing(params: CommandParams, base: str) -> str | None:
    """Why the job cannot run here (a module of ``requires`` its interpreter cannot
    import), or None."""
    if not params.requires:
        return None
    python = job_interpreter(params, base)
    if python is None:
        return None  # not a Python job ftbench can ask: the job will say so itself
    try:
        out = subprocess.run(
            [python, "-c", _FIND, *params.requires], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        lacking = [str(n) for n in json.loads(out.strip().splitlines()[-1])]
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as err:
        return f"the job's interpreter ({python}) could not be asked what it has: {err}"
    if not lacking:
        return None
    return f"the job imports {', '.join(lacking)}, which its interpreter ({python}) lacks"


def job_interpreter(params: CommandParams, base: str) -> str | None:
    """The Python a command job runs in: that of its first command whose program is a
    Python, or a script whose ``#!`` line names one (``base``: the folder commands'
    ``cwd`` is relative to)."""
    for c in params.commands:
        exe = program(fixed(c.argv[0]), os.path.join(base, c.cwd), c.env)
        python = _python_of(exe, c.env) if exe else None
        if python is not None:
            return python
    return None


def _python_of(exe: str, env: dict[str, str]) -> str | None:
    if Path(exe).name.startswith("python"):
        return exe
    try:
        with open(exe, "rb") as fh:
            head = fh.readline(512)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].decode(errors="replace").split()
    if words and Path(words[0]).name.startswith("python"):
        return words[0]
    if len(words) > 1 and Path(words[0]).name == "env" and words[1].startswith("python"):
        return program(words[1], os.getcwd(), env)
    return None
