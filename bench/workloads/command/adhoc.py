"""The scenario of ``ftbench run --job ... -- COMMAND...``: the everyday case, no file.

The command is the job as the user launches it; the options say what to do to it. The
world size comes from the launcher's own arguments where ftbench knows them (torchrun's
and ``ft_launcher``'s ``--nproc-per-node`` x ``--nnodes``, ``accelerate launch
--num_processes``), else from ``--world-size``. The scenario is validated like a file
(:func:`bench.scenario.loader.parse`), so a bad option is one line naming it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILE = "ftbench run --job"
"""What errors about the command line's scenario name as its file."""

#: Launchers whose arguments say the world's size: (program name, per-node flags, node-count flags).
LAUNCHERS: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...] = (
    (("torchrun", "ft_launcher", "torch.distributed.run"), ("--nproc-per-node", "--nproc_per_node"), ("--nnodes",)),
    (("accelerate",), ("--num_processes", "--num-processes"), ("--num_machines", "--num-machines")),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class JobOptions:
    """What ``ftbench run --job`` was told besides the command."""

    fault: str = "kill"
    target: int = 1
    at_step: int | None = None
    after_s: float | None = None
    duration_s: float | None = None
    world_size: int | None = None
    steps: int | None = None
    pg_timeout_s: float | None = None
    per_rank: bool = False
    progress: str = "auto"
    name: str = ""
    trials: int | None = None
    deadline_s: float | None = None


def world_size(argv: Sequence[str]) -> int | None:
    """The ranks a launcher command starts, where its arguments say so."""
    program = Path(argv[0]).name if argv else ""
    for names, per_node, nodes in LAUNCHERS:
        if program not in names and not (program.startswith("python") and len(argv) > 2 and argv[2] in names):
            continue
        procs, hosts = _flag(argv, per_node), _flag(argv, nodes)
        if procs is None or not procs.isdigit():
            return None
        count = hosts.split(":")[-1] if hosts else "1"
        return int(procs) * int(count) if count.isdigit() else None
    return None


def _flag(argv: Sequence[str], names: tuple[str, ...]) -> str | None:
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def scenario(argv: Sequence[str], opts: JobOptions) -> dict[str, Any]:
    """The raw scenario (as parsed TOML) of the command ``argv`` under ``opts``."""
    from bench.scenario.config import ConfigError

    if not argv:
        raise ConfigError(FILE, "COMMAND", "the job's command after `--` (e.g. -- torchrun ... train.py)")
    size = opts.world_size or world_size(argv)
    if size is None:
        raise ConfigError(
            FILE, "--world-size", "the number of ranks the job runs (its launcher's arguments do not say)"
        )
    trigger: dict[str, Any] = {"jitter": "step"}
    if opts.after_s is not None:
        trigger["after_s"] = opts.after_s
    else:
        trigger["at_step"] = opts.at_step if opts.at_step is not None else 50
    fault: dict[str, Any] = {"kind": opts.fault, "target": {"ranks": [opts.target]}, "trigger": trigger}
    if opts.duration_s is not None:
        fault["duration_s"] = opts.duration_s
    command: dict[str, Any] = {"argv": list(argv), "cwd": os.getcwd(), "per_rank": opts.per_rank}
    workload: dict[str, Any] = {
        "kind": "command",
        "world_size": size,
        "progress": opts.progress,
        "commands": [command],
    }
    if opts.steps is not None:
        workload["steps"] = opts.steps
    else:
        workload["steps"] = 10**9  # as many as the job runs: its end is its commands' exit
    if opts.pg_timeout_s is not None:
        workload["pg_timeout_s"] = opts.pg_timeout_s
    measure: dict[str, Any] = {}
    if opts.trials is not None:
        measure["trials"] = opts.trials
    if opts.deadline_s is not None:
        measure["deadline_s"] = opts.deadline_s
    return {
        "name": opts.name or _name(argv),
        "description": "ftbench run --job -- " + " ".join(argv)[:200],
        "workload": workload,
        "faults": [fault],
        "measure": measure,
    }


def _name(argv: Sequence[str]) -> str:
    """A run name from the job's script (``train``), else its program."""
    scripts = [Path(a).stem for a in argv[1:] if a.endswith(".py")]
    base = scripts[0] if scripts else Path(argv[0]).name
    cleaned = "".join(c if c.isalnum() or c in "-_" else "-" for c in base)[:40].strip("-_")
    return f"job-{cleaned or 'command'}"
