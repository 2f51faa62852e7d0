"""Undo records: what must be reverted if the harness dies mid-fault.

Before an injector changes the system outside the trial's processes (a namespace, a
firewall rule, a qdisc, a queue daemon), it writes the commands that revert the change
into a record file. The injector removes the record once it has undone the change
itself. Whatever is left is reverted by the guard when a harness dies, and by
``ftbench cleanup`` for runs whose guard could not run either.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

STATE_DIR = Path(os.environ.get("FTBENCH_STATE_DIR", "/tmp/ftbench-state"))


def register(run_id: str, what: str, commands: list[list[str]]) -> Path:
    """Record ``commands`` (argv lists, run in order) that revert ``what``."""
    directory = STATE_DIR / run_id
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{uuid.uuid4().hex}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"what": what, "commands": commands}))
    tmp.rename(path)
    return path


def forget(path: Path) -> None:
    """The change was reverted normally: drop its record."""
    path.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:
        pass


def pending(run_id: str | None = None) -> list[Path]:
    if not STATE_DIR.is_dir():
        return []
    runs = [STATE_DIR / run_id] if run_id else sorted(p for p in STATE_DIR.iterdir() if p.is_dir())
    return [p for run in runs if run.is_dir() for p in sorted(run.glob("*.json"))]


def undo_all(run_id: str | None = None) -> list[str]:
    """Run every pending record's commands (errors ignored: some targets may be gone).

    Returns what was reverted, for the caller to report.
    """
    reverted = []
    for path in pending(run_id):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            path.unlink(missing_ok=True)
            continue
        for argv in record.get("commands", []):
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, check=False)
        reverted.append(str(record.get("what", path.name)))
        forget(path)
    return reverted
