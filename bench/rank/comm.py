"""Collectives as workloads see them, and how their failures are named.

A workload reduces through a :class:`Collectives`: for a stock strategy (fail-stop,
torchrun restart) that is :class:`StockCollectives`, plain ``torch.distributed`` called
the way users call it (blocking ``dist.all_reduce``; DDP with its built-in reducer).
ftbench interposes only where a rank-side fault must sit (a hang, a straggler, a bit
flip inside a collective), and then as thinly as it can: a wrapper around
``dist.all_reduce``, or for DDP a communication hook that calls the stock all-reduce
hook. Which interposer is active is recorded with every trial (``interposer``).
A strategy that is itself a recovery design brings its own layer (reinit's abortable
collectives, :mod:`bench.rank.abortable`).

Failures are named from their messages (gloo raises plain ``RuntimeError`` for
everything) and from where the user's code saw them: the exception out of
``backward()``, ``all_reduce()`` or ``wait()`` (``site``).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from injectors.rankside import INJECTED_TAG

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

ABORT_TAG = "ftbench-abort"
"""What reinit's out-of-band abort writes into the errors it raises."""

#: (message fragment, how) in order; the first match names how a failure was detected.
_PATTERNS: tuple[tuple[str, str], ...] = (
    (ABORT_TAG, "peer_abort"),
    (INJECTED_TAG, "injected"),
    ("process group has not been initialized", "aborted"),
    ("Connection closed by peer", "peer_closed"),
    ("Connection reset by peer", "peer_reset"),
    ("Read error", "peer_reset"),
    ("Write error", "peer_reset"),
    ("Broken pipe", "peer_reset"),
    ("Timed out", "timeout"),
    ("timed out", "timeout"),
    ("Timeout", "timeout"),
    ("NCCL", "nccl_error"),
)


def classify(message: str) -> str:
    """Name the way a collective failed, from its message."""
    for fragment, how in _PATTERNS:
        if fragment in message:
            return how
    return "error"


class CollectiveError(RuntimeError):
    """A collective failed; ``how`` says how it was noticed (see :func:`classify`),
    ``site`` the call that raised it in the user's code (``backward``, ``all_reduce``,
    ``wait``), where known."""

    def __init__(self, message: str, how: str | None = None, *, site: str = "") -> None:
        super().__init__(message)
        self.how = how or classify(message)
        self.site = site


class CorruptionDetected(CollectiveError):
    """Replicas that must be identical are not: every rank learns it at once (from a
    collective), along with a group rank whose state the majority shares."""

    def __init__(self, message: str, *, source: int, bad: list[int]) -> None:
        super().__init__(message, "checksum", site="all_reduce")
        self.source = source
        self.bad = bad


class site:
    """Label a failure that escapes this block with the call it came out of.

    A class rather than a generator-based context manager: it wraps every collective of
    every step, and entering a generator-based one costs several times as much (a
    generator object, ``next`` twice), on the ranks' shared cores (``make bench``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if isinstance(exc, RuntimeError) and not getattr(exc, "site", ""):
            exc.site = self.name  # type: ignore[attr-defined]


_ALL_REDUCE = site("all_reduce")


class Hook(Protocol):
    """Rank-side fault hooks (:mod:`injectors.rankside`) around every collective."""

    def before(self, tensor: torch.Tensor) -> None: ...

    def after(self, tensor: torch.Tensor) -> None: ...


class Collectives(Protocol):
    """What a workload reduces through, whichever strategy made the group."""

    group_rank: int
    group_size: int

    @property
    def averages(self) -> bool:
        """Whether DDP's gradient reduction averages over the group (stock) or sums."""

    @property
    def interposer(self) -> str:
        """What ftbench put in the collective path: ``none`` when the stack runs as shipped."""

    def all_reduce(self, tensor: torch.Tensor) -> None:
        """Sum ``tensor`` over the group in place."""

    def attach_ddp(self, ddp: DistributedDataParallel) -> None:
        """Install what this layer needs on a new DDP wrapper (nothing, for stock)."""

    def as_failure(self, exc: BaseException) -> CollectiveError | None:
        """The exception as a collective failure, or ``None`` if it is something else."""


class StockCollectives:
    """Plain ``torch.distributed``: blocking ``dist.all_reduce`` and DDP's own reducer,
    with a thin interposer only when rank-side faults (or ``launch.interposer =
    "always"``, to measure its cost) need one."""

    averages = True

    def __init__(
        self, *, group_rank: int, group_size: int, hooks: Sequence[Hook] = (), interpose: bool = False
    ) -> None:
        self.group_rank = group_rank
        self.group_size = group_size
        self.hooks = list(hooks)
        self.interpose = interpose or bool(self.hooks)
        self._ddp = False

    @property
    def interposer(self) -> str:
        if not self.interpose:
            return "none"
        return "ddp-comm-hook" if self._ddp else "all_reduce-wrapper"

    def all_reduce(self, tensor: torch.Tensor) -> None:
        for hook in self.hooks:
            hook.before(tensor)
        with _ALL_REDUCE:
            dist.all_reduce(tensor)
        for hook in self.hooks:
            hook.after(tensor)

    def attach_ddp(self, ddp: DistributedDataParallel) -> None:
        self._ddp = True
        if self.interpose:
            # A lambda: DDP checks a hook's annotations at run time, and this module's are strings.
            ddp.register_comm_hook(None, lambda _state, bucket: self._ddp_hook(bucket))

    def _ddp_hook(self, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """The stock all-reduce hook (average over the group), with the fault hooks
        around it."""
        for hook in self.hooks:
            hook.before(bucket.buffer())
        fut = default_hooks.allreduce_hook(dist.group.WORLD, bucket)  # type: ignore[arg-type]
        if not self.hooks:
            return fut

        def after(f: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            tensor = f.value()
            for hook in self.hooks:
                hook.after(tensor)
            return tensor

        return fut.then(after)

    def as_failure(self, exc: BaseException) -> CollectiveError | None:
        """A collective error by its type (NCCL's DistError) or its message (gloo's
        RuntimeError); any other exception is a bug, and crashes the rank."""
        if isinstance(exc, CollectiveError):
            return exc
        if isinstance(exc, RuntimeError):
            message = str(exc)
            if isinstance(exc, dist.DistError) or classify(message) != "error":
                return CollectiveError(message, site=getattr(exc, "site", ""))
        return None
