"""ft_launcher, instrumented: ``python -m bench.strategies.nvrx_launcher.agent EVENTS_DIR -- <ft_launcher args>``.

This runs NVRx's real ``ft_launcher`` main, its own ``LocalElasticAgent`` (a fork of
torchrun's, vendored by NVRx) and its ``RankMonitorServer`` processes. It only wraps
methods so that each records an event and then returns what the original returned:

- the agent's lifecycle, as for torchrun (:func:`bench.probe.site.ftbench_probe_agents.instrument_agent`):
  ``detect`` by the agent's monitor, ``teardown_*``, ``rendezvous_*``, ``workers_started``;
- each rank monitor's two timeout checks (``_is_hb_timeout_elapsed``,
  ``_is_section_timeout_elapsed``): the first check of a connected rank that finds its
  timeout elapsed is a ``detect`` (src ``rank_monitor``, how ``rank_monitor_heartbeat``
  or ``rank_monitor_section``). The monitor then kills the rank itself (NVRx's
  ``_handle_timeout``), which the agent sees as a failed worker.

Rank monitors are forked from the agent (NVRx starts them with a ``fork`` context), so
the wrapped methods are theirs too; each monitor writes its own event file.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.jobs.elastic import agent_main
from bench.probe.site.ftbench_probe_agents import instrument_agent
from bench.procs.events import EventWriter


class MonitorEvents:
    """The event file of the rank monitor process this runs in, opened on first use
    (the monitors are forked after instrumentation, each with a pid of its own)."""

    def __init__(self, events_dir: Path) -> None:
        self.events_dir = events_dir
        self.writer: EventWriter | None = None
        self.reported: set[int] = set()
        """Worker pids whose hang this monitor already reported."""

    def emit(self, event: str, **fields: Any) -> None:
        pid = os.getpid()
        if self.writer is None or self.writer.base.get("pid") != pid:
            self.writer = EventWriter(self.events_dir / f"rankmon-{pid}.jsonl", src="rank_monitor", pid=pid)
            self.writer.emit("proc_start", role="rank_monitor")
        self.writer.emit(event, **fields)

    def timed_out(self, monitor: Any, how: str) -> None:
        """A timeout check found its timeout elapsed: report it once per worker process."""
        info = monitor.rank_info
        if info is None or info.pid in self.reported:
            return
        self.reported.add(info.pid)
        self.emit("detect", how=how, of_rank=int(info.global_rank), of_pid=info.pid)


def observe_rank_monitors(server_cls: type, events: MonitorEvents) -> None:
    """Wrap the rank monitor's timeout checks; what they return is unchanged."""

    def around(name: str, how: str) -> None:
        original: Callable[..., bool] = getattr(server_cls, name)

        @functools.wraps(original)
        def wrapper(self: Any, curr_time: float) -> bool:
            elapsed = original(self, curr_time)
            if elapsed:
                events.timed_out(self, how)
            return elapsed

        setattr(server_cls, name, wrapper)

    around("_is_hb_timeout_elapsed", "rank_monitor_heartbeat")
    around("_is_section_timeout_elapsed", "rank_monitor_section")


def run(events: EventWriter, launcher_args: list[str]) -> None:
    """Instrument NVRx's agent and rank monitors, then hand over to ft_launcher's main."""
    from nvidia_resiliency_ext.fault_tolerance import launcher
    from nvidia_resiliency_ext.fault_tolerance._torch_elastic_compat.agent.server.api import WorkerState
    from nvidia_resiliency_ext.fault_tolerance.rank_monitor_server import RankMonitorServer

    instrument_agent(launcher.LocalElasticAgent, events.emit, (WorkerState.FAILED, WorkerState.UNHEALTHY))
    observe_rank_monitors(RankMonitorServer, MonitorEvents(events.path.parent))
    launcher.main(launcher_args)


if __name__ == "__main__":
    agent_main(sys.argv[1:], "python -m bench.strategies.nvrx_launcher.agent EVENTS_DIR -- FT_LAUNCHER_ARGS...", run)
