"""What every injector is handed, and what it promises.

An injector is constructed from its fault's knobs, then ``inject(target)`` breaks
something and returns the details worth recording (the mechanism used, what it hit);
``undo()`` reverts a transient fault and must be idempotent. A transient injector has
a ``duration_s``; the harness calls ``undo()`` when it has elapsed, and always at the
end of the trial. Changes outside the trial's processes are also registered with
:mod:`injectors.undo` before they are made, so they are reverted even if the harness
dies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Target:
    ranks: Sequence[int]
    """Launch ranks hit by the fault."""
    pids: Sequence[int]
    """Their live processes at the moment of injection."""
    namespaces: Sequence[str] = field(default_factory=tuple)
    """Network namespaces of their hosts, when the trial runs in namespaces."""


class Injector(Protocol):
    duration_s: float | None

    def inject(self, target: Target) -> dict[str, Any]: ...

    def undo(self) -> None: ...
