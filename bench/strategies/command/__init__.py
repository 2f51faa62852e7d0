"""``command``: the stack of a job given as its own launch command.

The command is the stack (torchrun with its restarts, NVRx's ``ft_launcher``,
Lightning's or Hugging Face's trainers, a torchft job beside its lighthouse): ftbench
starts it as written, with its probe on the job's interpreters (:mod:`bench.probe`),
faults it from outside and reads what it shows (:mod:`.job`, :mod:`.translate`). It has
no knobs: the job's own arguments are its knobs, and a sweep of ``workload.commands``
compares them. Its phases are those its launchers show (an elastic agent's monitor,
teardown, rendezvous and new workers; the workers' torch import; the new process
group; a torchft quorum) and those the probe sees the job's own code do: its model
wrapped in DDP or FSDP (``build``), its checkpoint loaded (``restore``) and its first
step, named as ftbench's instrumented ``restart`` names them. ``catchup`` is what is
left: the steps it computed again (0 when it lost none).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.scenario.strategy import STRATEGIES, Strategy


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandStackParams:
    """A command job's stack is its command: its knobs are the command's arguments."""


STRATEGIES.register(
    Strategy(
        name="command",
        params=CommandStackParams,
        impl="bench.strategies.command.job:CommandJob",
        stack="the job's own command (its launcher, framework and recovery), observed by ftbench's probe",
        supervised=False,
        workloads=("command",),
        rank_side_faults=False,
        namespaces=True,
        host_commands=True,
        components=("agent", "store"),
        blame=("detect@agent:first_failure",),
        unbound_servers=("a launcher's own stores and rendezvous (torchrun, ft_launcher), torchft's servers",),
        phases=(
            ("agent", "detect@agent"),  # an elastic agent's monitor sees the failed worker
            ("teardown", "teardown_end"),  # ...stops the survivors
            ("rendezvous", "rendezvous_end"),  # ...rendezvouses again
            ("spawn", "workers_started"),  # ...starts new workers
            ("import", "import_done"),  # which have imported torch
            ("pg", "reconfigured"),  # and formed a new process group
            ("build", "model_wrapped"),  # the job wrapped its model in DDP or FSDP
            ("restore", "restore_end"),  # ...and loaded its checkpoint (torch.load, DCP's load)
            ("quorum", "quorum"),  # torchft: a quorum after the fault
            ("first_step", "first_step"),  # ...and ended its first step, replayed or not
        ),
        summary="your own job's command: its launcher and framework recover, ftbench watches from outside",
    )
)
