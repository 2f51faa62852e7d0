"""The rank side of ``nvrx-kill``: NVRx's injector called from ftbench's rank-side hook."""

from __future__ import annotations

from typing import Any

from injectors.rankside import RankHook


class NVRxKill(RankHook):
    """At the first collective after arming, hand the rank to NVRx's SIGKILL fault.

    ``inject_fault()`` draws its victim rank from a seed; the comparison needs ftbench's
    victim, so the hook calls the function ``inject_fault()`` dispatches to once it has
    chosen (``dispatch_fault_injection``), with NVRx's own SIGKILL handler and no delay.
    """

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        from nvidia_resiliency_ext.inprocess.tools import inject_fault

        self.nvrx = inject_fault  # imported here: not in the collective's path

    def before(self, tensor: Any) -> None:
        if self.take():
            stamp = lambda: self.emit("inject", mechanism="nvrx inject_fault: SIGKILL")
            self.nvrx.dispatch_fault_injection(self.nvrx.Fault.SIGKILL, 0.0, stamp)
