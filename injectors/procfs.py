"""Reading ``/proc/PID/stat``: the one parser of it in the project (bench's process
hygiene uses it too; injectors never import bench)."""

from __future__ import annotations


def stat_fields(pid: int) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, ...); empty
    when the process is gone. The name is in parentheses and may hold spaces and ")"."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return []


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    fields = stat_fields(pid)
    return bool(fields) and fields[0] not in (b"Z", b"X")
