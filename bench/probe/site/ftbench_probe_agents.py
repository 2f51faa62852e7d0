"""The elastic agents of torchrun and NVRx's ``ft_launcher``, as the probe sees them:
their lifecycle methods wrapped with events, their behaviour unchanged.

A module of its own because ftbench's own ``restart`` and ``nvrx-launcher`` strategies
instrument their agents with it too, in the harness's processes, where the probe itself
is never started. It knows nothing of the probe: it is given the function that writes
an event.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

Emit = Callable[..., Any]


def instrument_agent(cls: type, emit: Emit, failed_states: Sequence[Any]) -> None:
    """Wrap a torchelastic agent's lifecycle methods with events; behaviour unchanged.

    ``detect`` (how ``agent_monitor``) on the first monitor pass that finds the worker
    group in one of ``failed_states`` (each launcher has its own ``WorkerState``: torch's,
    or NVRx's vendored copy), naming the launcher's own root cause (the failure with the
    smallest timestamp, as its error report does); ``teardown_start``/``teardown_end``
    around stopping the workers; ``rendezvous_start``/``rendezvous_end`` (with the
    restarts left); ``workers_started`` with the new workers' pids.
    """
    failing = {"now": False}

    def around(name: str, before: str | None, after: Callable[[Any, Any], None]) -> None:
        original = getattr(cls, name)
        if getattr(original, "_ftbench_wrapped", False):
            return

        @functools.wraps(original)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if before:
                emit(before)
            result = original(self, *args, **kwargs)
            after(self, result)
            return result

        wrapper._ftbench_wrapped = True  # type: ignore[attr-defined]
        setattr(cls, name, wrapper)

    def monitored(_agent: Any, result: Any) -> None:
        bad = result.state in failed_states
        if bad and not failing["now"]:
            failures = {str(rank): f.exitcode for rank, f in result.failures.items()}
            first = min(result.failures, key=lambda r: result.failures[r].timestamp) if result.failures else None
            emit("detect", how="agent_monitor", state=result.state.name, failures=failures, first_failure=first)
        failing["now"] = bad

    around("_monitor_workers", None, monitored)
    around("_stop_workers", "teardown_start", lambda _a, _r: emit("teardown_end"))
    around(
        "_rendezvous",
        "rendezvous_start",
        lambda agent, _r: emit("rendezvous_end", remaining_restarts=getattr(agent, "_remaining_restarts", None)),
    )
    around("_start_workers", None, lambda _a, ids: emit("workers_started", pids=list(ids.values())))
