"""``torch-reconfigure``: torch's own in-place recovery (torch 2.14 and later).

A stock strategy: the ranks create their group with ``init_process_group(...,
enable_reconfigure=True)`` and re-form it in the same processes with torch's
``dist._reconfigure`` (a fresh uuid, the handles of the members, exchanged through the
job's store), training on with the global batch split among fewer ranks; collectives and
DDP are torch's own. torch decides nothing about membership: who is in the next world,
which step everyone resumes after and from whose state are what a user of this API has
to write, and here come from the shared in-process recovery (:mod:`bench.rank.reform`,
the same as ``reinit``'s). How a survivor learns of the failure is the user's choice too,
and a knob (``notify``). The rank side is ``policy.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from bench.scenario.config import ConfigError, bounded
from bench.scenario.strategy import STRATEGIES, Strategy

if TYPE_CHECKING:
    from bench.scenario.model import Scenario


@dataclass(frozen=True, kw_only=True, slots=True)
class TorchReconfigureParams:
    notify: Literal["error", "get-error", "abort", "abandon"] = "error"
    """How a survivor learns that its group failed. ``error``: from its own collective's
    error only, torch as shipped (a survivor blocked on another survivor learns at its
    process-group timeout). ``get-error``: also a thread polling the backend's
    ``get_error()``, which aborts the group (``ProcessGroup.abort()``) when it reports an
    error. ``abort``: the first survivor to fail posts the failure to the store, and a
    thread in every rank aborts its group with ``ProcessGroup.abort()``. ``abandon``:
    collectives are issued asynchronously and waited on by ftbench's abortable layer,
    which gives up a collective as soon as the failure is posted (the ``interposer``
    column then says ``ftbench-collectives``)."""
    poll_ms: float = bounded(10.0, gt=0)
    """How often ``get-error`` polls the backend."""
    join_window_s: float = bounded(0.0, ge=0)
    """After a failure, how long the agreement on the next world waits for members that
    neither check in nor are known dead (a stalled rank), counted from the last check-in
    or reported death. 0: the process-group timeout plus 1 s unless ``notify =
    "abandon"`` (a survivor blocked behind another checks in only at its own timeout, and
    must not be taken for a stalled rank), else 0.5 s."""
    reconfigure_timeout_s: float = bounded(30.0, gt=0)
    """``timeout`` of ``dist._reconfigure``: how long it waits for every listed peer."""
    regrow: bool = False
    """Start a replacement for each rank that died; it creates its group with
    ``enable_reconfigure``, publishes its handle and joins the running world at a step
    boundary, taking its state from a live peer (time to full strength). A rank left out
    of the next world (it saw the failure after the agreement closed) rejoins the same
    way, in its own process."""
    regrow_delay_s: float = bounded(1.0, ge=0)
    """How long after a rank's death its replacement is started (a scheduler's delay)."""


def check(scenario: Scenario, file: str) -> None:
    """A join window the user sets must outlast the process-group timeout unless survivors
    are told out of band (``abandon``): otherwise a survivor blocked behind another, which
    checks in only at its own timeout, is taken for a stalled rank and left out."""
    params: TorchReconfigureParams = scenario.recovery.params
    if params.join_window_s and params.notify != "abandon" and params.join_window_s <= scenario.workload.pg_timeout_s:
        raise ConfigError(
            file,
            "recovery.torch-reconfigure.join_window_s",
            f"above workload.pg_timeout_s ({scenario.workload.pg_timeout_s}) when notify is "
            f"{params.notify!r} (a survivor blocked behind another checks in at its own timeout), or 0",
            params.join_window_s,
        )


STRATEGIES.register(
    Strategy(
        name="torch-reconfigure",
        params=TorchReconfigureParams,
        impl="bench.jobs.supervisor:RegrowingJob",
        rank_policy="bench.strategies.torch_reconfigure.policy:TorchReconfigure",
        stack="torch.distributed's in-place reconfigure (enable_reconfigure, _reconfigure), torch's own "
        "collectives and DDP; membership agreed over the job's store",
        torch=">=2.14",
        namespaces=True,
        agents=True,
        blame=("isolate@rank:excluded",),  # the members the re-formed world leaves out
        timeouts=("workload.pg_timeout_s",),
        phases=(
            ("isolate", "isolate"),
            ("handles", "handles"),
            ("reconfigure", "reconfigured"),
            ("restore", "restore_end"),
        ),
        check=check,
        summary="torch's own in-place recovery: survivors re-form the group with dist._reconfigure, train on",
    )
)
