"""A run's results directory: ``results/<scenario>/<UTC time>_<commit>/``.

- ``trials.jsonl``: the durable record, one line per fault per finished trial, appended
  the moment a trial ends, so an interrupted run keeps every finished trial and can be
  resumed (``ftbench run --resume DIR``).
- ``trials.csv``: the same rows as a table (rewritten after each trial). Its column
  names are a public interface.
- ``steps.csv``: one row per rank per step of every trial (timelines, loss curves).
- ``events/<point>/<trial>/*.jsonl``: the raw event logs every figure comes from.
- ``run.json``: what ran, on what, and each point's statistics.
- ``.lock``: held (``flock``) by the harness writing the run, with its pid and command:
  a second harness writing into the same directory is refused, and a reader knows the
  run is still in progress. The kernel drops the lock when its holder dies, however.
"""

from __future__ import annotations

import csv
import errno
import fcntl
import json
import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.procs.events import Event
from bench.results.facts import FaultFigures, TrialFacts, world_steps
from bench.results.walltime import WALL_PARTS, wall_parts
from bench.scenario.figures import FAULT_FIGURES, TRIAL_FIGURES, is_phase
from bench.scenario.model import Point
from bench.scenario.requirements import parse
from bench.scenario.strategy import stack_packages

#: The versions that ran each row (``env`` is the point's ``launch.env``, "" for the
#: harness's own environment; then the packages strategies declare): runs across
#: environments compare on them.
VERSION_COLUMNS = ("env", "python", "torch", "nccl", *(p.column for p in stack_packages()))
#: Leading columns of trials.csv; the fault's figures, its phases and the rest follow.
ID_COLUMNS = (
    "point_hash",
    "label",
    "strategy",
    "workload",
    "backend",
    "device",
    "world_size",
    "fault",
    "fault_index",
    "target",
    "mechanism",
    "interposer",
    "trial",
    "seed",
    "reference",
)
TAIL_COLUMNS = (
    "outcome",
    "error",
    "detect_how",
    "detect_site",
    "hold_s",
    "tolerance_s",
    "ff_step_s",
    "steps_done",
    *TRIAL_FIGURES,
    "trial_wall_s",
    *WALL_PARTS,
    "trial_rows",
    *VERSION_COLUMNS,
)
STEP_COLUMNS = (
    "point_hash",
    "label",
    "trial",
    "reference",
    "rank",
    "pid",
    "gen",
    "step",
    "t_s",
    "step_s",
    "world_size",
    "group_rank",
    "loss",
    "loss_share",
    "algbw_gbps",
    "busbw_gbps",
)


LOCK = ".lock"
HOLDER_ENV = "FTBENCH_RUN_HOLDER"
"""Set by a harness for the child harness it starts on the same run (a point in another
environment): the pid of the lock's holder, which the child may write under."""
#: Write errors that no retry will fix: the run ends, its finished trials intact.
FATAL_WRITE = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG)


MIN_FREE = 1 << 20
"""Free bytes below which a finished trial is taken to have hit a full disk."""


class ResultsError(RuntimeError):
    """The results directory cannot be written (full, read-only) or is another harness's."""


def write_failure(err: OSError, path: Path) -> ResultsError | None:
    """A one-line ResultsError for a write error no retry fixes, else None."""
    if err.errno not in FATAL_WRITE:
        return None
    where = err.filename or path
    return ResultsError(
        f"cannot write {where}: {os.strerror(err.errno or 0)} ({errno.errorcode.get(err.errno or 0, '?')}); "
        f"every finished trial is intact in {path}: make room, then `ftbench run --resume {path}`"
    )


def holder(path: Path) -> dict[str, Any] | None:
    """Who holds the run's lock (pid, command), or None when no live harness does."""
    try:
        fd = os.open(path / LOCK, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                found = json.loads(os.pread(fd, 1 << 16, 0) or b"{}")
            except json.JSONDecodeError:
                found = {}
            return found if isinstance(found, dict) else {}
        return None
    finally:
        os.close(fd)


@dataclass
class RunDir:
    path: Path
    _lock_fd: int = field(default=-1, repr=False, compare=False)

    @classmethod
    def create(cls, out: str | Path, scenario_name: str, commit: str) -> RunDir:
        """A new run directory under ``out/<scenario_name>/``; the name must be a plain
        name (the scenario model checks it), and the directory stays inside ``out``."""
        base = Path(out) / scenario_name
        if Path(scenario_name).name != scenario_name or scenario_name in ("", ".", ".."):
            raise ValueError(f"scenario name {scenario_name!r} is not a plain name")
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        path = base / f"{stamp}_{commit}"
        suffix = 1
        while path.exists():
            suffix += 1
            path = base / f"{stamp}_{commit}-{suffix}"
        try:
            path.mkdir(parents=True)
        except OSError as err:
            raise write_failure(err, path) or err from None
        return cls(path)

    def lock(self, command: Sequence[str]) -> None:
        """Hold the run for this harness, or refuse with the holder's pid and command.
        A child harness its holder started (:data:`HOLDER_ENV`) writes under the holder's."""
        try:
            fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise write_failure(err, self.path) or err from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            found = holder(self.path) or {}
            pid = found.get("pid")
            if pid is not None and str(pid) == os.environ.get(HOLDER_ENV) and pid == os.getppid():
                return
            raise ResultsError(
                f"{self.path} is being written by another harness (pid {pid}: {' '.join(found.get('command', []))}); "
                "wait for it to end or stop it, then resume"
            ) from None
        record = json.dumps({"pid": os.getpid(), "command": list(command)}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
        self._lock_fd = fd

    def check_room(self) -> None:
        """ENOSPC when the file system has less than :data:`MIN_FREE` left: a rank that
        ran out of room mid-trial lost events, so that trial is not recorded whole."""
        st = os.statvfs(self.path)
        if st.f_bavail * st.f_frsize < MIN_FREE:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))

    def unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # the flock goes with the last descriptor
            self._lock_fd = -1

    @property
    def trials_jsonl(self) -> Path:
        return self.path / "trials.jsonl"

    @property
    def steps_csv(self) -> Path:
        return self.path / "steps.csv"

    def events_dir(self, point: Point, trial: int | str) -> Path:
        return self.path / "events" / point.point_hash[:12] / str(trial)

    def rows(self) -> list[dict[str, Any]]:
        """Every committed row; a torn line (a write cut short) is skipped."""
        return read_rows(self.trials_jsonl)[0]

    def finished(self) -> set[tuple[str, int, bool]]:
        """(point_hash, trial, reference) of every trial already recorded."""
        return {(r["point_hash"], int(r["trial"]), bool(r.get("reference"))) for r in self.rows()}

    def add_trial(
        self,
        point: Point,
        trial: int,
        *,
        reference: bool,
        backend: str,
        faults: Sequence[FaultFigures],
        facts: TrialFacts,
        wall_s: float,
        events: Sequence[Event],
        versions: dict[str, Any],
    ) -> list[dict[str, Any]]:
        """Commit one trial: all of its rows in one ``write(2)``, then its steps.

        ``versions`` are those of the environment the trial ran in (the harness that ran
        it knows them; this module reads files and probes nothing)."""
        s = point.scenario
        rows = []
        # Where the tensors were, as the ranks found it: a rank on a GPU stamps its context.
        device = "cuda" if any(e["event"] == "cuda_ready" for e in events) else "cpu"
        parts = wall_parts(events, wall_s=wall_s, warmup_steps=s.workload.warmup_steps)
        for f in faults:
            row: dict[str, Any] = {
                "point_hash": point.point_hash,
                "label": point.label,
                "strategy": s.recovery.strategy,
                "workload": s.workload.kind,
                "backend": backend,
                "device": device,
                "world_size": s.workload.world_size,
                "trial": trial,
                "seed": s.measure.seed,
                "reference": reference,
                "trial_rows": len(faults),
                **f.row(),
                "ff_step_s": facts.ff_step_s,
                "steps_done": facts.steps_done,
                **{name: getattr(facts, name) for name in TRIAL_FIGURES},
                "trial_wall_s": wall_s,
                **parts,
                "env": " ".join(parse(s.launch.env)),
                **{k: versions.get(k) for k in VERSION_COLUMNS if k != "env"},
            }
            rows.append(row)
        self.add_rows(rows)
        _append_steps(self.steps_csv, step_rows(point.point_hash, point.label, trial, reference, events))
        return rows

    def add_rows(self, rows: Sequence[dict[str, Any]]) -> None:
        """Append the rows of one trial to the durable record in one ``write(2)`` on an
        ``O_APPEND`` file (a process killed at any moment leaves all of them or none;
        only a machine that loses power can tear the write, and readers skip a torn
        line), then rewrite trials.csv."""
        payload = "".join(json.dumps(_jsonable(row)) + "\n" for row in rows).encode()
        fd = os.open(self.trials_jsonl, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                written = os.write(fd, payload)
                if written != len(payload):  # a full file system takes what fits
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.trials_jsonl))
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, size)  # the trial's rows whole, or none of them
                raise
        finally:
            os.close(fd)
        self.write_csv()

    def repair(self) -> list[str]:
        """Make a run that was cut short consistent before it is resumed: drop torn lines
        and trials that are not whole from trials.jsonl, rebuild steps.csv from the
        events of the trials that are, rewrite trials.csv. What was dropped."""
        rows, notes = read_rows(self.trials_jsonl)
        groups: dict[tuple[str, int, bool], list[dict[str, Any]]] = {}
        for r in rows:
            groups.setdefault((r["point_hash"], int(r["trial"]), bool(r.get("reference"))), []).append(r)
        kept = []
        for key, group in groups.items():
            expected = int(group[0].get("trial_rows") or len(group))
            if len(group) == expected:
                kept += group
            else:
                notes.append(f"trial {key[1]} of point {key[0][:12]} had {len(group)} of {expected} rows: run again")
        if notes:
            _replace(self.trials_jsonl, "".join(json.dumps(_jsonable(r)) + "\n" for r in kept))
        self._rebuild_steps(kept)
        self.write_csv()
        return notes

    def _rebuild_steps(self, rows: Sequence[dict[str, Any]]) -> None:
        from bench.procs.events import read_events

        steps = []
        seen = set()
        for r in rows:
            key = (r["point_hash"], int(r["trial"]), bool(r.get("reference")))
            if key in seen:
                continue
            seen.add(key)
            directory = self.path / "events" / key[0][:12] / ("reference" if key[2] else str(key[1]))
            if directory.is_dir():
                steps += step_rows(key[0], str(r["label"]), key[1], key[2], read_events(directory))
        self.steps_csv.unlink(missing_ok=True)
        _append_steps(self.steps_csv, steps)

    def write_csv(self) -> None:
        rows = self.rows()
        columns = list(ID_COLUMNS) + list(FAULT_FIGURES)
        phases = sorted({k for r in rows for k in r if is_phase(k)})
        columns += phases + list(TAIL_COLUMNS)
        extra = sorted({k for r in rows for k in r} - set(columns))
        tmp = self.path / "trials.csv.tmp"
        with open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns + extra)
            writer.writeheader()
            for r in rows:
                writer.writerow({k: _cell(r.get(k)) for k in columns + extra})
        tmp.rename(self.path / "trials.csv")

    def read_run_json(self) -> dict[str, Any]:
        path = self.path / "run.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def write_run_json(self, info: dict[str, Any]) -> None:
        _replace(self.path / "run.json", json.dumps(_jsonable(info), indent=2, sort_keys=False) + "\n")


def read_rows(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of a trials.jsonl and notes on the lines skipped (torn, not JSON objects)."""
    if not path.exists():
        return [], []
    rows, notes = [], []
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw) if raw.endswith(b"\n") else None
            except json.JSONDecodeError:
                row = None
            if isinstance(row, dict) and "point_hash" in row and "trial" in row:
                rows.append(row)
            else:
                notes.append(f"{path}: line {n} is torn or not a row; skipped")
    return rows, notes


def _replace(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a temporary file, fsynced, renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.rename(path)


def _append_steps(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with open(path, "a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=STEP_COLUMNS, extrasaction="ignore")
        if fh.tell() == 0:
            writer.writeheader()
        writer.writerows(rows)


def step_rows(
    point_hash: str, label: str, trial: int, reference: bool, events: Iterable[Event]
) -> list[dict[str, Any]]:
    events = list(events)
    start = next((e["t"] for e in events if e["event"] == "trial_start"), events[0]["t"] if events else 0)
    losses = {key: ws.loss for key, ws in world_steps(events).items() if ws.has_loss}
    rows = []
    for e in events:
        if e["event"] != "step_end":
            continue
        key = (int(e.get("gen", 0)), int(e["step"]))
        rows.append(
            {
                "point_hash": point_hash,
                "label": label,
                "trial": trial,
                "reference": reference,
                "rank": e["rank"],
                "pid": e.get("pid"),
                "gen": key[0],
                "step": key[1],
                "t_s": (e["t"] - start) / 1e9,
                "step_s": e.get("step_s"),
                "world_size": e.get("world_size"),
                "group_rank": e.get("group_rank"),
                "loss": losses.get(key),
                "loss_share": e.get("loss_share"),
                "algbw_gbps": e.get("algbw_gbps"),
                "busbw_gbps": e.get("busbw_gbps"),
            }
        )
    return rows


def _cell(value: Any) -> Any:
    """NaN and None are written as empty cells: a figure that does not exist is empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
