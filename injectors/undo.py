"""Undo records: what must be reverted if the harness dies mid-fault.

Before an injector changes the system outside the trial's processes (a namespace, a
firewall rule, a qdisc, a queue daemon), it writes the commands that revert the change
into a record file. The injector removes the record once it has undone the change
itself. Whatever is left is reverted by the guard when a harness dies, and by
``ftbench cleanup`` for runs whose guard could not run either.

Records are commands that root runs, so where they live is guarded: a directory only
the running user can write (``/run/ftbench`` for root, ``$XDG_RUNTIME_DIR/ftbench`` or
``/tmp/ftbench-<uid>`` for others; ``$FTBENCH_STATE_DIR`` overrides), created with mode
0700 and refused if it is a symbolic link, belongs to someone else or is open to
others; the same holds for every run directory and record in it, and a record's
commands must start with a program ftbench's injectors use. A record that fails any
check is reported and left alone, never run; one bad record does not stop the others.

Each run directory also holds ``owner`` (the harness's pid): runs whose harness is alive
are *live*, and nothing sweeping leftovers touches them.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from injectors.procfs import alive

#: Programs an undo record may run (the injectors' own tools, and ftbench's Python).
ALLOWED = frozenset({"ip", "tc", "iptables", "nft"})
OWNER = "owner"


class UnsafeStateDir(RuntimeError):
    """The state directory (or a run directory in it) could be written by someone else."""


def state_dir() -> Path:
    override = os.environ.get("FTBENCH_STATE_DIR")
    if override:
        return Path(override)
    if os.geteuid() == 0:
        return Path("/run/ftbench")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "ftbench" if runtime else Path(f"/tmp/ftbench-{os.geteuid()}")


def _private(path: Path, *, create: bool) -> bool:
    """Make sure ``path`` is a directory of ours that nobody else can write; False if it
    does not exist (and ``create`` is off)."""
    if create:
        try:
            path.mkdir(mode=0o700, parents=False)
        except FileExistsError:
            pass
        except FileNotFoundError:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            return _private(path, create=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeStateDir(f"{path}: expected a directory of ftbench's state, found something else")
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise UnsafeStateDir(
            f"{path}: expected a directory owned by uid {os.geteuid()} with mode 0700, found "
            f"uid {st.st_uid} mode {stat.S_IMODE(st.st_mode):04o}: refusing to use it"
        )
    return True


def run_dir(run_id: str, *, create: bool = True) -> Path | None:
    if "/" in run_id or run_id in ("", ".", ".."):
        raise ValueError(f"run id {run_id!r} is not a plain name")
    root = state_dir()
    if not _private(root, create=create):
        return None
    path = root / run_id
    return path if _private(path, create=create) else None


def claim(run_id: str, pid: int) -> None:
    """Record that harness ``pid`` owns ``run_id`` (its run is live while it lives)."""
    path = run_dir(run_id)
    assert path is not None
    _write(path / OWNER, str(pid))


def register(run_id: str, what: str, commands: list[list[str]]) -> Path:
    """Record ``commands`` (argv lists, run in order) that revert ``what``."""
    for argv in commands:
        problem = _command_problem(argv)
        if problem:
            raise ValueError(f"undo record for {what}: {problem}")
    directory = run_dir(run_id)
    assert directory is not None
    path = directory / f"{uuid.uuid4().hex}.json"
    _write(path, json.dumps({"what": what, "commands": commands}))
    return path


def _write(path: Path, text: str) -> None:
    """Write a file only this user can read or write, atomically (write, then rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.rename(tmp, path)


def forget(path: Path) -> None:
    """The change was reverted normally: drop its record."""
    path.unlink(missing_ok=True)


def release(run_id: str) -> None:
    """The run is over: drop its owner mark and, if no record is left, its directory."""
    try:
        path = run_dir(run_id, create=False)
    except UnsafeStateDir:
        return  # not ours to touch
    if path is None:
        return
    (path / OWNER).unlink(missing_ok=True)
    try:
        path.rmdir()
    except OSError:
        pass  # records left: a later cleanup reverts them


def problem() -> str:
    """Why the state directory cannot be trusted ("" if it can, or does not exist)."""
    try:
        _private(state_dir(), create=False)
    except UnsafeStateDir as err:
        return str(err)
    return ""


def live_runs() -> set[str]:
    """Runs whose owning harness is alive."""
    root = state_dir()
    try:
        if not _private(root, create=False):
            return set()
        runs = [e for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    except (OSError, UnsafeStateDir):
        return set()
    live = set()
    for entry in runs:
        try:
            pid = int((Path(entry.path) / OWNER).read_text())
        except (OSError, ValueError):
            continue
        if alive(pid):
            live.add(entry.name)
    return live


@dataclass
class UndoReport:
    reverted: list[str] = field(default_factory=list)
    """What was reverted."""
    problems: list[str] = field(default_factory=list)
    """Records that were refused or whose commands failed, and why."""


def pending(run_id: str | None = None) -> list[Path]:
    """Record files of one run, or of every run (not checked yet: see :func:`undo_all`)."""
    root = state_dir()
    try:
        if not _private(root, create=False):
            return []
        runs = [root / run_id] if run_id else sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    except UnsafeStateDir:
        return []
    return [p for run in runs if run.is_dir() for p in sorted(run.glob("*.json"))]


def undo_all(run_id: str | None = None) -> UndoReport:
    """Run every pending record's commands; go on past any record that cannot be trusted
    or fails, reporting it. A run's directory is kept while a record is left in it."""
    report = UndoReport()
    try:
        paths = pending(run_id)
    except OSError as err:
        report.problems.append(f"cannot list undo records: {err}")
        return report
    for path in paths:
        try:
            record = _trusted(path)
        except (OSError, ValueError, UnsafeStateDir) as err:
            report.problems.append(f"{path}: not run: {err}")
            continue
        failed = _run(record.commands)
        if failed:
            report.problems.append(f"{path} ({record.what}): {failed}")
        report.reverted.append(record.what)
        forget(path)
    return report


@dataclass(frozen=True)
class Record:
    what: str
    commands: list[list[str]]


def _trusted(path: Path) -> Record:
    """The record, if it is ours and says what a record may say."""
    _private(path.parent, create=False)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise ValueError(f"owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):04o}, not a record of ours")
        record = json.loads(fh.read(1 << 20))
    if not isinstance(record, dict) or not isinstance(record.get("what"), str):
        raise ValueError("expected an object with 'what' and 'commands'")
    commands = record.get("commands")
    if not isinstance(commands, list):
        raise ValueError("expected 'commands' to be a list of argument lists")
    for argv in commands:
        problem = _command_problem(argv)
        if problem:
            raise ValueError(problem)
    return Record(what=record["what"], commands=commands)


def _command_problem(argv: object) -> str:
    """Why ``argv`` may not be in an undo record ("" if it may)."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return f"a command must be a non-empty list of strings, got {argv!r}"
    program = argv[0]
    if program == "env":  # env VAR=value ... PROGRAM ARGS
        rest = [a for a in argv[1:] if "=" not in a]
        program = rest[0] if rest else ""
    if program in ALLOWED or program == sys.executable:
        return ""
    return f"{program!r} is not a program undo records may run"


def _run(commands: list[list[str]]) -> str:
    """Run the commands in order; what could not be run ("" if everything could). A
    command that runs and fails is normal here (its target went with an earlier one: a
    namespace deleted with its rules), so only commands that cannot run are reported."""
    failed = []
    for argv in commands:
        try:
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            failed.append(f"`{' '.join(argv)}`: {err}")
    return "; ".join(failed)
