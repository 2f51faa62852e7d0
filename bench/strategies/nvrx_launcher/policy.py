"""nvrx-launcher's worker side: ``restart``'s policy, plus NVRx's ``RankMonitorClient``.

The world, the generation and the checkpoint (and its designs) are exactly ``restart``'s (ft_launcher sets
the same torchelastic environment). What NVRx adds is the stock client integration its
documentation gives users: connect to this worker's rank monitor
(``init_workload_monitoring``) once the process exists, then prove progress after every
step, by a heartbeat or by closing and reopening the ``step`` section. The monitor kills
a worker that stops doing so for longer than its timeout.
"""

from __future__ import annotations

from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

from bench.rank.policy import Position
from bench.rank.workload import Workload
from bench.strategies.nvrx_launcher import NVRxLauncherParams
from bench.strategies.nvrx_launcher.job import STEP_SECTION
from bench.strategies.restart.policy import RestartPolicy


class NVRxLauncher(RestartPolicy):
    def start(self, workload: Workload) -> Position:
        params: NVRxLauncherParams = self.spec.recovery.params
        self.sections = params.hang_detection == "sections"
        self.client = RankMonitorClient()
        self.client.init_workload_monitoring()
        self.events.emit("rank_monitor_connected", hang_detection=params.hang_detection)
        pos = super().start(workload)
        if self.sections:
            self.client.start_section(STEP_SECTION)
        return pos

    def after_step(self, pos: Position, workload: Workload) -> Position | int:
        if self.sections:
            self.client.end_section(STEP_SECTION)
        else:
            self.client.send_heartbeat()
        answer = super().after_step(pos, workload)  # the checkpoint, every checkpoint_every steps
        if self.sections:
            self.client.start_section(STEP_SECTION)
        return answer

    def finish(self, pos: Position) -> None:
        super().finish(pos)  # background saves finish inside the last section
        if self.sections:
            self.client.end_all_sections()
        self.client.shutdown_workload_monitoring()
