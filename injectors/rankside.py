"""Faults that act inside a rank: hang, GIL hold, straggler, raise, abort, bit flip.

They wrap the rank's collectives: every collective a workload issues passes through
``before(tensor)`` of each hook, and its result through ``after(tensor)`` before the
caller sees it (bench.comm does the wrapping, so workloads need no edit). The harness
arms a hook by sending the rank a real-time signal (``SIGRTMIN + fault index``, see
:class:`Arm`); the signal handler only sets a flag. The hook then acts on the rank's
next collective and records the injection itself, at the moment it acts, through the
``emit`` callback it was given.

Rank-side code: these classes run inside rank processes and may use torch.
"""

from __future__ import annotations

import ctypes
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from injectors.base import Target

if TYPE_CHECKING:
    from torch import Tensor
from injectors.signals import _send

Emit = Callable[..., Any]

INJECTED_TAG = "ftbench-injected"


def arm_signal(fault_index: int) -> int:
    """The real-time signal that arms rank-side fault ``fault_index``."""
    sig = signal.SIGRTMIN + fault_index
    if sig > signal.SIGRTMAX:
        raise ValueError(
            f"fault index {fault_index} has no real-time signal (at most "
            f"{signal.SIGRTMAX - signal.SIGRTMIN + 1} rank-side faults)"
        )
    return sig


class Arm:
    """Harness side of every rank-side fault: signal the targets to arm their hook."""

    duration_s: float | None = None

    def __init__(self, *, fault_index: int) -> None:
        self.signal = arm_signal(fault_index)

    def inject(self, target: Target) -> dict[str, Any]:
        return {"armed": _send(target.pids, self.signal), "signal": int(self.signal)}

    def undo(self) -> None:
        """The hook ends by itself (one-shot, or its window elapses)."""


class RankHook:
    """Base of the rank-side hooks: armed by a signal, acting on collectives."""

    def __init__(self, *, emit: Emit, seed: int) -> None:
        self.emit = emit
        self.rng = random.Random(seed)
        self.armed = False

    def arm(self) -> None:
        """Called from the signal handler: only set a flag (it may interrupt anything)."""
        self.armed = True

    def take(self) -> bool:
        """True once per arming: the first collective after the signal acts."""
        if self.armed:
            self.armed = False
            return True
        return False

    def before(self, tensor: Tensor) -> None:
        """Before the collective is issued."""

    def after(self, tensor: Tensor) -> None:
        """After it completed, before the caller sees the result."""


class Hang(RankHook):
    """The rank stops inside its next collective for ``duration_s`` (others wait on it)."""

    def __init__(self, *, duration_s: float, **kw: Any) -> None:
        super().__init__(**kw)
        self.duration_s = duration_s

    def before(self, tensor: Tensor) -> None:
        if self.take():
            self.emit("inject", duration_s=self.duration_s)
            self._wait()
            self.emit("fault_end")

    def _wait(self) -> None:
        time.sleep(self.duration_s)  # releases the GIL: the rank's other threads go on


class HoldGIL(Hang):
    """A C call that keeps the GIL for ``duration_s``: no Python thread of the rank runs
    (its abort watcher neither), while the C++ backend threads still do."""

    def _wait(self) -> None:
        whole, frac = divmod(self.duration_s, 1.0)
        spec = _Timespec(int(whole), int(frac * 1e9))
        _PYDLL.nanosleep(ctypes.byref(spec), None)  # PyDLL: the GIL is held across the call


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_PYDLL = ctypes.PyDLL(None)


class Straggler(RankHook):
    """Every collective of the rank starts ``delay_s`` late, for ``duration_s``."""

    def __init__(self, *, delay_s: float, duration_s: float, **kw: Any) -> None:
        super().__init__(**kw)
        self.delay_s = delay_s
        self.duration_s = duration_s
        self.until: float | None = None

    def before(self, tensor: Tensor) -> None:
        if self.take():
            self.until = time.monotonic() + self.duration_s
            self.emit("inject", delay_s=self.delay_s, duration_s=self.duration_s)
        if self.until is None:
            return
        if time.monotonic() >= self.until:
            self.until = None
            self.emit("fault_end")
            return
        time.sleep(self.delay_s)


class Raise(RankHook):
    """The rank's next collective fails with an error instead of being issued."""

    def before(self, tensor: Tensor) -> None:
        if self.take():
            self.emit("inject")
            raise RuntimeError(f"{INJECTED_TAG}: failure raised inside a collective")


class Abort(RankHook):
    """The rank aborts its default process group (the communicator) mid-job."""

    def before(self, tensor: Tensor) -> None:
        if self.take():
            import torch.distributed as dist

            self.emit("inject")
            dist.distributed_c10d._abort_process_group()


class BitFlip(RankHook):
    """Flip ``bit`` of ``elements`` float32 values of the next gradient bucket.

    ``after_reduce`` corrupts this rank's reduced result only (replicas diverge);
    ``before_reduce`` corrupts its contribution (every replica applies the same
    wrong gradient). Silent: nothing raises.
    """

    def __init__(self, *, bit: int, elements: int, when: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.bit = bit
        self.elements = elements
        self.when = when
        self._pending = False

    def before(self, tensor: Tensor) -> None:
        import torch

        if tensor.dtype != torch.float32:
            return  # not a gradient bucket (a checksum, say): wait for one
        if self.take():
            if self.when == "before_reduce":
                self._flip(tensor)
            else:
                self._pending = True

    def after(self, tensor: Tensor) -> None:
        if self._pending:
            self._pending = False
            self._flip(tensor)

    def _flip(self, tensor: Tensor) -> None:
        import torch

        flat = tensor.view(-1)
        words = flat.view(torch.int32)
        picked = self.rng.sample(range(flat.numel()), min(self.elements, flat.numel()))
        before = [float(flat[i]) for i in picked[:4]]
        for i in picked:
            words[i] ^= (1 << self.bit) if self.bit < 31 else -(1 << 31)
        self.emit(
            "inject",
            bit=self.bit,
            when=self.when,
            elements=len(picked),
            indices=picked[:4],
            before=before,
            after=[float(flat[i]) for i in picked[:4]],
        )


def install(hooks: Sequence[tuple[int, RankHook]]) -> None:
    """Arm hook i on ``SIGRTMIN + i``. Must run in the main thread (with hooks to arm:
    a training function that a stack runs in a thread of its own has none)."""
    if not hooks:
        return
    assert threading.current_thread() is threading.main_thread()
    for index, hook in hooks:
        signal.signal(arm_signal(index), _arming(hook))


def _arming(hook: RankHook) -> Callable[[int, FrameType | None], None]:
    """A signal handler that only arms ``hook`` (it may interrupt anything)."""

    def handler(_sig: int, _frame: FrameType | None) -> None:
        hook.arm()

    return handler
