"""torchft's Manager, as the probe sees it: each new quorum it joins, each commit vote,
and each error reported to it.

torchft's DDP and Manager catch a failed collective and report it to the Manager
instead of raising: that report is the survivor's detection; an error found only when
the step asks for its commit is recorded as ``should_commit`` returns. It knows nothing
of the probe: it is given how to write an event, how to record an exception, and how
to watch a method's return (all of which never raise).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Emit = Callable[..., Any]
Raised = Callable[[BaseException, str], Any]
After = Callable[[Any, tuple[Any, ...], dict[str, Any]], None]
WatchAfter = Callable[[Any, str, After], None]


def watch_manager(manager: type, emit: Emit, raised: Raised, watch_after: WatchAfter) -> None:
    """Put the three watches on torchft's ``Manager`` class."""
    seen: dict[str, Any] = {"quorum": None}

    def voted(result: Any, args: tuple[Any, ...], _kwargs: dict[str, Any]) -> None:
        emit("commit", ok=bool(result))
        errored = getattr(args[0], "_errored", None) if args else None
        original = getattr(errored, "original_exception", None)
        if not result and isinstance(original, BaseException):
            raised(original, "torchft_should_commit")

    def quorum(_result: Any, args: tuple[Any, ...], _kwargs: dict[str, Any]) -> None:
        # Read the Manager's own fields: its accessors wait on the quorum, which is the
        # method watched here.
        of = args[0] if args else None
        quorum_id = getattr(of, "_quorum_id", None)
        if quorum_id != seen["quorum"]:
            seen["quorum"] = quorum_id
            emit("quorum", quorum_id=quorum_id, replicas=getattr(of, "_participating_replica_world_size", None))

    def reported(_result: Any, args: tuple[Any, ...], _kwargs: dict[str, Any]) -> None:
        if len(args) > 1 and isinstance(args[1], BaseException):
            raised(args[1], "torchft_report_error")

    watch_after(manager, "should_commit", voted)
    watch_after(manager, "wait_quorum", quorum)
    watch_after(manager, "report_error", reported)
