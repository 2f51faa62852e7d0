"""Harness-side contract of a recovery strategy: a :class:`Job` per trial."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bench.launch import ProcessHost
from bench.metrics import DEFAULT_PHASES
from bench.scenario import Point


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialContext:
    point: Point
    trial: int
    seed: int
    """``measure.seed + trial``: data, model and random choices of this trial."""
    trial_dir: Path
    events_dir: Path
    host: ProcessHost
    backend: str
    """Resolved backend, ``gloo`` or ``nccl``."""
    deadline_s: float
    fault_free: bool = False
    """A reference run: same point and seed, no faults injected."""
    network: Any = None
    """The trial's :class:`injectors.netns.Topology` when hosts live in network
    namespaces (link faults), else None (everything on loopback)."""

    def namespace_of(self, rank: int) -> str:
        """The network namespace of ``rank``'s host ("" on loopback)."""
        if self.network is None:
            return ""
        return self.network.hosts[rank // self.point.scenario.launch.ranks_per_host].namespace

    @property
    def store_host(self) -> str:
        """Where ranks reach the launcher's store: the root namespace's bridge address."""
        return self.network.root_address if self.network is not None else "127.0.0.1"


class Job(ABC):
    """The processes of one trial under one strategy.

    The trial driver calls :meth:`start`, then :meth:`poll` in a loop (injecting faults
    between calls) until it returns True or the deadline passes, then :meth:`close`,
    which must leave no process of the trial behind, whatever state it is in.
    """

    phases: ClassVar[tuple[tuple[str, str], ...]] = DEFAULT_PHASES
    """(phase name, event that ends it) between detection and the first good step."""

    def __init__(self, ctx: TrialContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def poll(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for something to happen; True once the job is over."""

    @abstractmethod
    def close(self) -> None: ...

    @classmethod
    def unavailable(cls, scenario: Any) -> str | None:
        """Why this strategy cannot run ``scenario`` on this machine (its stack is not
        installed, say), or None; the runner then skips the point with that reason."""
        return None

    def versions(self) -> dict[str, Any]:
        """Versions of the stack this strategy ran on (beyond torch and the backend)."""
        return {}
