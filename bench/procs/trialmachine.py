"""What a trial's faults of the machine need before its ranks start, and its removal.

An ``oom`` fault needs every rank in a memory cgroup of its own from its first
allocation on (charges do not move with a process), so the trial gets a parent group
and each rank joins a child of it as it starts (:func:`injectors.cgroup.join`, from
:func:`bench.rank.entry.main`). A ``storage`` fault needs the checkpoint directory on
a file system of a known size, so a tmpfs is mounted over it before the ranks start.
The reference trial of such a point gets the same set-up, so that it differs from the
faulted trials by the fault only.

Both are registered as undo records first (:mod:`injectors.undo`), so the guard or
``ftbench cleanup`` removes them if the harness dies; :meth:`TrialMachine.close`
removes them when the trial ends, once its processes are gone.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.scenario.model import Scenario
from injectors import cgroup, undo
from injectors.storage import Volume


def _python(module: str, *args: str) -> list[str]:
    """An undo record's command running one of the injectors' own entry points."""
    root = str(Path(cgroup.__file__).resolve().parents[1])
    return ["env", f"PYTHONPATH={root}", sys.executable, "-m", module, *args]


@dataclass
class TrialMachine:
    cgroup: Path | None = None
    """The trial's parent memory group (the ranks' groups are its children)."""
    volume: Volume | None = None
    """The tmpfs over the trial's checkpoint directory."""
    records: list[Path] = field(default_factory=list)

    @classmethod
    def set_up(cls, scenario: Scenario, *, run_id: str, name: str, checkpoint_dir: Path) -> TrialMachine:
        """Whatever the scenario's machine faults need (nothing for other faults). On a
        failure, what was set up already is removed before the error goes on."""
        kinds = {f.kind for f in scenario.faults}
        machine = cls()
        try:
            if "oom" in kinds:
                path = cgroup.create_parent(name)
                machine.cgroup = path
                machine.records.append(
                    undo.register(run_id, f"memory cgroup {path}", [_python("injectors.cgroup", "remove", str(path))])
                )
            if "storage" in kinds:
                size = max(int(f.knobs()["size_mb"]) for f in scenario.faults if f.kind == "storage") << 20
                volume = Volume(checkpoint_dir, size)
                machine.records.append(
                    undo.register(
                        run_id,
                        f"checkpoint tmpfs {checkpoint_dir}",
                        [_python("injectors.storage", "unmount", str(checkpoint_dir))],
                    )
                )
                volume.mount()
                machine.volume = volume
        except BaseException:
            machine.close()
            raise
        return machine

    def describe(self) -> dict[str, Any]:
        """What was set up, for the trial's event log."""
        out: dict[str, Any] = {}
        if self.cgroup is not None:
            out["memory_cgroup"] = str(self.cgroup)
        if self.volume is not None:
            out |= {"checkpoint_fs": str(self.volume.path), "checkpoint_fs_bytes": self.volume.size_bytes}
        return out

    def close(self) -> list[str]:
        """Remove the groups and unmount the file system (idempotent); what could not be
        removed (its undo record is kept, for ``ftbench cleanup``)."""
        problems: list[str] = []
        if self.cgroup is not None:
            problems += cgroup.remove_tree(self.cgroup)
            self.cgroup = None
        if self.volume is not None:
            why = self.volume.close()
            if why:
                problems.append(why)
            self.volume = None
        if not problems:
            for record in self.records:
                undo.forget(record)
            self.records = []
        return problems
