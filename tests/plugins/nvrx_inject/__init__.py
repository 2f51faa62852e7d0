"""``nvrx-kill``: a fault kind whose mechanism is NVRx's own fault injector.

``nvidia_resiliency_ext.inprocess.tools.inject_fault`` is what NVRx's tests and examples
use to break a rank: for ``Fault.SIGKILL`` it forks a helper that sends SIGKILL to the
rank. Declared as a rank-side fault, it runs inside the target rank when the harness arms
it (at the trigger, like every rank-side fault) and NVRx's helper kills the rank; the
injection is stamped by NVRx's own callback, just before the signal is sent. Found through
``FTBENCH_PLUGINS=tests.plugins.nvrx_inject`` (tests/integ/test_nvrx.py).
"""

from __future__ import annotations

from bench.scenario.faults import FAULTS, FaultKind, NoParams

# (A module is imported once per process: in the harness through $FTBENCH_PLUGINS, in a
# rank as the hook's package; registering once per process is what the registry wants.)

FAULTS.register(
    FaultKind(
        name="nvrx-kill",
        params=NoParams,
        impl="tests.plugins.nvrx_inject.hook:NVRxKill",
        family="process",
        rank_side=True,
        summary="test plug-in: SIGKILL the target through NVRx's inject_fault",
    )
)
