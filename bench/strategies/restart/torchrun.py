"""torchrun, instrumented: ``python -m bench.strategies.restart.torchrun EVENTS_DIR -- <torchrun args>``.

This runs the real ``torch.distributed.run`` and its real ``LocalElasticAgent``; it only
wraps four of the agent's methods so that each records an event (with the monotonic
clock of the host) before and after calling the original. The agent's behaviour is
unchanged; its timeline becomes visible:

- ``detect`` (src ``agent``, how ``agent_monitor``): the first monitor pass that finds
  the worker group FAILED or UNHEALTHY;
- ``teardown_start`` / ``teardown_end``: the agent stopping the surviving workers;
- ``rendezvous_start`` / ``rendezvous_end``: the c10d re-rendezvous;
- ``workers_started``: new worker processes exist (pids).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.procs.hygiene import set_pdeathsig
from bench.results.events import EventWriter


def instrument(cls: type, events: EventWriter) -> None:
    """Wrap the agent's lifecycle methods with events; behaviour is unchanged."""
    from torch.distributed.elastic.agent.server.api import WorkerState

    failing = {"now": False}

    def around(name: str, before: str | None, after: Callable[[Any, Any], None]) -> None:
        original = getattr(cls, name)

        @functools.wraps(original)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if before:
                events.emit(before)
            result = original(self, *args, **kwargs)
            after(self, result)
            return result

        setattr(cls, name, wrapper)

    def monitored(_agent: Any, result: Any) -> None:
        bad = result.state in (WorkerState.FAILED, WorkerState.UNHEALTHY)
        if bad and not failing["now"]:
            failures = {str(rank): f.exitcode for rank, f in result.failures.items()}
            events.emit("detect", how="agent_monitor", state=result.state.name, failures=failures)
        failing["now"] = bad

    around("_monitor_workers", None, monitored)

    def stopped(_agent: Any, _result: Any) -> None:
        events.emit("teardown_end")

    def rendezvoused(agent: Any, _result: Any) -> None:
        events.emit("rendezvous_end", remaining_restarts=getattr(agent, "_remaining_restarts", None))

    def started(_agent: Any, ids: Any) -> None:
        events.emit("workers_started", pids=list(ids.values()))

    around("_stop_workers", "teardown_start", stopped)
    around("_rendezvous", "rendezvous_start", rendezvoused)
    around("_start_workers", None, started)


def main(argv: list[str]) -> None:
    set_pdeathsig()
    events_dir, sep, *torchrun_args = argv
    if sep != "--":
        raise SystemExit("usage: python -m bench.strategies.restart.torchrun EVENTS_DIR -- TORCHRUN_ARGS...")
    events = EventWriter(Path(events_dir) / f"agent-{os.getpid()}.jsonl", src="agent", pid=os.getpid())
    events.emit("proc_start", role="agent")
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.run import main as torchrun

    instrument(LocalElasticAgent, events)
    torchrun(torchrun_args)


if __name__ == "__main__":
    main(sys.argv[1:])
