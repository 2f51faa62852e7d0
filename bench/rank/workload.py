"""The rank-side workload contract.

A workload owns its model and data, not the process group: the strategy forms groups
and hands the workload a :class:`bench.rank.comm.Collectives` for each generation through
:meth:`Workload.attach`. It must be deterministic from ``seed`` and the step number,
whatever the current world size, so that a recovered run can be compared with the
fault-free reference of the same seed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from bench.rank.comm import Collectives


class Workload(ABC):
    def __init__(self, params: Any, *, seed: int, world_size: int, device: torch.device) -> None:
        self.params = params
        self.seed = seed
        self.world_size = world_size
        """World size at launch: it fixes the global batch for the whole trial."""
        self.device = device

    @abstractmethod
    def attach(self, comm: Collectives) -> None:
        """Bind to a (new) process-group generation; called before the first step and
        after every reconfiguration, once the state is consistent across the group."""

    @abstractmethod
    def step(self, step: int) -> dict[str, Any]:
        """Run step ``step`` (1-based); return extra ``step_end`` fields.

        Raises :class:`bench.rank.comm.CollectiveError` when a collective fails.
        """

    def upload(self) -> int:
        """Move what the constructor built in host memory to :attr:`device` (model and
        optimizer state); the bytes moved. Called once, right after construction, so that
        a GPU rank's upload is timed apart from the build. A workload that allocates on
        its device directly has nothing to move (0)."""
        return 0

    def state_dict(self) -> dict[str, Any]:
        """Everything a peer needs to continue from this rank's state."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Adopt a peer's state (restore from peer or from a checkpoint)."""

    def dcp_state_dict(self) -> dict[str, Any]:
        """The state in the form ``torch.distributed.checkpoint`` saves, and loads in
        place (a workload with sharded state returns its shards, keyed the same on every
        rank); by default :meth:`state_dict`."""
        return self.state_dict()

    def load_dcp_state_dict(self, state: dict[str, Any]) -> None:
        """Adopt a state :meth:`dcp_state_dict` made and DCP filled in."""
        self.load_state_dict(state)

    def checksum(self) -> dict[str, Any]:
        """``digest`` (bitwise identity) and ``l1`` (magnitude) of the trained state, to
        tell replicas that diverged or a run that learnt something wrong; {} if none."""
        return {}


def move(module: torch.nn.Module, optimizer: torch.optim.Optimizer | None, device: torch.device) -> int:
    """``module`` and ``optimizer``'s state to ``device``; the bytes that moved.

    ``Module.to`` keeps each Parameter object and swaps its data, so an optimizer made
    over the host parameters goes on stepping the moved ones; the state it already
    holds (momentum, Adam's moments) is moved beside them, but for ``step``, which torch
    keeps in host memory unless the optimizer is capturable or fused (as its own
    ``load_state_dict`` does)."""
    tensors = {id(t): t for t in (*module.parameters(), *module.buffers())}  # a tied weight once
    nbytes = sum(t.nbytes for t in tensors.values() if t.device != device)
    module.to(device)
    if optimizer is not None:
        for state in optimizer.state.values():
            for key, value in state.items():
                if key != "step" and isinstance(value, torch.Tensor) and value.device != device:
                    nbytes += value.nbytes
                    state[key] = value.to(device)
    return nbytes
