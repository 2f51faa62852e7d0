"""``command``: the user's own training job, given as the command that launches it.

The job is a black box: ftbench starts its commands (no shell), watches it through the
probe it puts on the job's interpreters and through what the job prints
(:mod:`bench.probe`, :mod:`bench.strategies.command`), and faults it from outside. The
command is the stack, so its only strategy is ``command``. Its output formats are
:data:`PROGRESS_FORMATS` or a regular expression with a ``step`` group.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench.scenario.config import ConfigError, bounded
from bench.scenario.crosscheck import uses_namespaces
from bench.scenario.workload import WORKLOADS, WorkloadPlugin

if TYPE_CHECKING:
    from bench.scenario.model import Scenario

PROGRESS_FORMATS = ("auto", "plain", "torchtitan", "megatron", "huggingface", "lightning", "none")
"""What ``progress`` may name besides a regular expression (see
:mod:`bench.strategies.command.progress`)."""
PLACEHOLDERS = ("{checkpoint_dir}", "{seed}", "{host0}", "{free_port}", "{python}", "{bin}")
"""What an argument or an environment value may contain, replaced per trial: the trial's
own checkpoint folder (empty at the start of each trial; a ``storage`` fault fills its
file system), ``measure.seed``, ``{hostK}``, the address host K is reached at (its
network namespace's, where hosts have their own; else the loopback), a port that was
free when the trial started (the same everywhere in the trial), for a launcher's
rendezvous endpoint; and the harness's own interpreter and its folder (``{python}``,
``{bin}/torchrun``), for a job that runs in ftbench's environment."""


def fixed(text: str) -> str:
    """``text`` with the placeholders that do not change from trial to trial filled."""
    import sys

    return text.replace("{python}", sys.executable).replace("{bin}", os.path.dirname(sys.executable))


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandSpec:
    """One command of the job: a launcher (torchrun, ``ft_launcher``, ``accelerate
    launch``), a lighthouse, or a program started once per rank."""

    argv: tuple[str, ...] = bounded(max_items=512)
    """The program and its arguments, run without a shell; the program is looked up on
    ``PATH`` (the harness's, with ``env``'s ``PATH`` if it sets one) or relative to ``cwd``."""
    cwd: str = ""
    """Working directory, relative to the scenario file's folder ("": that folder; the
    current directory for ``ftbench run --job``)."""
    env: dict[str, str] = field(default_factory=dict)
    """Set in the command's environment, over the harness's."""
    per_rank: bool = False
    """Start the command once per rank (those of ``ranks``), each with the environment a
    launcher gives its workers (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
    ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` and
    ``TORCHELASTIC_USE_AGENT_STORE``: the store is ftbench's, as torchrun's agent hosts
    one for its workers). Without it the command is started once and launches the
    ranks itself."""
    ranks: tuple[int, ...] = bounded((), max_items=256)
    """With ``per_rank``: the ranks it starts (``LOCAL_RANK`` counts them in this order);
    empty: every rank of the job."""
    service: bool = False
    """A server the job needs (torchft's lighthouse), not part of its training: the job
    is over without it, and once it is, the service is stopped (SIGTERM) and its exit
    status does not count."""
    rank_base: int = bounded(0, ge=0, le=1_000_000)
    """Added to the ``RANK`` its processes carry, to give the job's rank: where several
    launchers each count their ranks from 0 (torchft: one torchrun per replica group,
    each of whose workers says ``RANK=0``), each command's ranks stay apart."""
    host: int = bounded(0, ge=0)
    """The host it runs on: with several hosts (``launch.ranks_per_host``), each is a
    network namespace of its own, as a multi-host run's are."""
    name: str = ""
    """What its output files and the report call it ("": ``cmd<index>``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandParams:
    commands: tuple[CommandSpec, ...] = bounded((), max_items=64)
    """The job's commands, started together (torchft: a lighthouse, and one torchrun per
    replica group)."""
    progress: str = "auto"
    """How the job shows its progress in its output: ``auto`` (each known format),
    ``plain`` (``step N`` ... ``loss X``), ``torchtitan``, ``megatron``, ``huggingface``,
    ``lightning``, ``none``, or a regular expression with a group named ``step`` (and
    optionally ``loss``). Progress lines give the job's own step numbers (a restarted
    job's resumed step, and so ``steps_lost``) and its loss (``loss_delta``); steps
    themselves come from the optimizer."""
    requires: tuple[str, ...] = bounded((), max_items=64)
    """Modules the job imports that its interpreter may lack (``lightning``,
    ``transformers``): a point whose interpreter cannot import one is skipped with the
    reason, rather than run to fail."""
    output_limit_mb: float = bounded(16.0, gt=0, le=4096)
    """Output kept per command, stream and trial; past it lines are counted, not kept
    (the job is never slowed down by what it prints)."""


def check(scenario: Scenario, file: str) -> None:
    """Commands that can start here; a progress format that exists; hosts in range."""
    p: CommandParams = scenario.workload.params
    if not any(not c.service for c in p.commands):
        raise ConfigError(file, "workload.commands", "at least one [[workload.commands]] that is not a service")
    hosts = scenario.workload.world_size // scenario.launch.ranks_per_host
    base = os.path.dirname(os.path.abspath(file)) if os.path.isfile(file) else os.getcwd()
    for i, c in enumerate(p.commands):
        key = f"workload.commands.{i}"
        if not c.argv or not c.argv[0]:
            raise ConfigError(file, f"{key}.argv", "a program and its arguments", list(c.argv))
        if c.host >= hosts:
            raise ConfigError(file, f"{key}.host", f"a host of the job (0 to {hosts - 1})", c.host)
        world = scenario.workload.world_size
        if any(not 0 <= r < world for r in c.ranks) or len(set(c.ranks)) != len(c.ranks):
            raise ConfigError(file, f"{key}.ranks", f"distinct ranks of the job (0 to {world - 1})", list(c.ranks))
        if c.ranks and not c.per_rank:
            raise ConfigError(file, f"{key}.ranks", "no ranks without per_rank = true", list(c.ranks))
        if c.rank_base and c.per_rank:
            raise ConfigError(
                file,
                f"{key}.rank_base",
                "0 with per_rank = true (its processes are given the job's ranks)",
                c.rank_base,
            )
        if c.service and c.per_rank:
            raise ConfigError(file, f"{key}.service", "false with per_rank = true (a service has no ranks)", True)
        per_host = scenario.launch.ranks_per_host
        spread = uses_namespaces(scenario)  # hosts of their own: a rank's host is rank // ranks_per_host
        if spread and c.per_rank and any(r // per_host != c.host for r in c.ranks or range(world)):
            raise ConfigError(
                file,
                f"{key}.ranks",
                f"ranks of host {c.host} ({per_host} a host: launch.ranks_per_host)",
                list(c.ranks),
            )
        cwd = os.path.join(base, c.cwd)
        if not os.path.isdir(cwd):
            raise ConfigError(file, f"{key}.cwd", "an existing folder", c.cwd or cwd)
        if program(fixed(c.argv[0]), cwd, c.env) is None:
            raise ConfigError(file, f"{key}.argv.0", "a program on PATH or a path to one", c.argv[0])
    if p.progress not in PROGRESS_FORMATS:
        try:
            pattern = re.compile(p.progress)
        except re.error as err:
            raise ConfigError(
                file, "workload.progress", f"a format or a regular expression ({err})", p.progress
            ) from None
        if "step" not in pattern.groupindex:
            raise ConfigError(
                file,
                "workload.progress",
                f"one of {', '.join(PROGRESS_FORMATS)} or a regex with (?P<step>...)",
                p.progress,
            )


def program(name: str, cwd: str, env: dict[str, str]) -> str | None:
    """Where ``name`` is: a path (relative to ``cwd``), or found on ``PATH``."""
    if os.sep in name:
        path = os.path.join(cwd, name)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(name, path=env.get("PATH", os.environ.get("PATH")))


WORKLOADS.register(
    WorkloadPlugin(
        name="command",
        params=CommandParams,
        impl="",
        check=check,
        rank_preload=(),
        strategy="command",
        summary="your own job, given as its launch command: observed from outside, no code change",
    )
)
