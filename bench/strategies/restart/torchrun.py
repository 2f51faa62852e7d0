"""torchrun, instrumented: ``python -m bench.strategies.restart.torchrun EVENTS_DIR -- <torchrun args>``.

This runs the real ``torch.distributed.run`` and its real ``LocalElasticAgent``; it only
wraps four of the agent's methods so that each records an event (with the monotonic
clock of the host) before and after calling the original
(:func:`bench.probe.site.ftbench_probe_agents.instrument_agent`). The agent's behaviour is unchanged; its
timeline becomes visible:

- ``detect`` (src ``agent``, how ``agent_monitor``): the first monitor pass that finds
  the worker group FAILED or UNHEALTHY;
- ``teardown_start`` / ``teardown_end``: the agent stopping the surviving workers;
- ``rendezvous_start`` / ``rendezvous_end``: the c10d re-rendezvous;
- ``workers_started``: new worker processes exist (pids).
"""

from __future__ import annotations

import sys

from bench.jobs.elastic import agent_main
from bench.probe.site.ftbench_probe_agents import instrument_agent
from bench.procs.events import EventWriter


def run(events: EventWriter, torchrun_args: list[str]) -> None:
    """Instrument torch's agent, then hand over to torchrun's own main."""
    from torch.distributed.elastic.agent.server.api import WorkerState
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.run import main as torchrun

    instrument_agent(LocalElasticAgent, events.emit, (WorkerState.FAILED, WorkerState.UNHEALTHY))
    torchrun(torchrun_args)


if __name__ == "__main__":
    agent_main(sys.argv[1:], "python -m bench.strategies.restart.torchrun EVENTS_DIR -- TORCHRUN_ARGS...", run)
