"""Where the training state lives: one checkpoint design per module, behind one interface.

This module stays light (no torch): the strategies' knobs name a design and validation
asks what it needs before any rank exists. The designs themselves (:mod:`.base` and the
modules it names) run inside ranks.

- ``torch-save``: group rank 0 writes one ``torch.save`` file, atomic by rename; the
  loop waits for it (ftbench's behaviour before the knob existed).
- ``dcp`` / ``dcp-async``: ``torch.distributed.checkpoint`` ``save`` / ``async_save``:
  every rank writes its part of one checkpoint folder per save; a folder counts once its
  ``.metadata`` exists (the coordinator writes it last).
- ``nvrx-async``: NVRx's asynchronous writer (``TorchAsyncCheckpoint``); CUDA tensors only.
- ``nvrx-local``: NVRx's local checkpoints (``LocalCheckpointManager``), each rank's
  state also replicated to a peer (``CliqueReplicationStrategy``).
"""

from __future__ import annotations

from typing import Literal, get_args

Design = Literal["torch-save", "dcp", "dcp-async", "nvrx-async", "nvrx-local"]
DESIGNS: tuple[str, ...] = get_args(Design)

IMPLS: dict[str, str] = {
    "torch-save": "bench.rank.checkpoint.torchsave:TorchSave",
    "dcp": "bench.rank.checkpoint.dcp:DCPSave",
    "dcp-async": "bench.rank.checkpoint.dcp:DCPAsyncSave",
    "nvrx-async": "bench.rank.checkpoint.nvrx:NVRxAsync",
    "nvrx-local": "bench.rank.checkpoint.nvrx:NVRxLocal",
}
"""``module:Class`` of each design (imported in the ranks only)."""

NEEDS_CUDA: dict[str, str] = {
    "nvrx-async": "NVRx's asynchronous writer calls torch.cuda.synchronize() on every save "
    "(TorchAsyncCheckpoint.async_save), which fails without CUDA ('Torch not compiled with CUDA enabled')",
}
"""Designs that cannot save CPU tensors, and the reason found by trying them on a CPU build."""

REPLICATION_FACTOR = 2
"""``nvrx-local``: copies of each rank's state, its own and one peer's (NVRx's default)."""


def needs_gpu(design: str, device: str) -> str | None:
    """Why ``design`` cannot save tensors on ``device`` (``cpu``), or None."""
    if device == "cpu" and design in NEEDS_CUDA:
        return f"checkpoint = {design!r} needs the ranks' tensors on a GPU: {NEEDS_CUDA[design]}"
    return None


def host_tensors(backend: str, device: str) -> bool:
    """Whether a point's tensors are known to live in host memory before it runs: asked
    for, or left to ``auto`` on gloo (``workload.device``)."""
    return device == "cpu" or (device == "auto" and backend == "gloo")


def check_design(design: str, *, backend: str, device: str, world_size: int, file: str, key: str) -> None:
    """Refuse, when the file is read, a design that cannot run with these settings."""
    from bench.scenario.config import ConfigError

    why = needs_gpu(design, "cpu") if host_tensors(backend, device) else None
    if why:
        raise ConfigError(
            file, key, f'a design that saves host tensors (workload.backend = "gloo", device not "cuda"): {why}', design
        )
    if design == "nvrx-local" and world_size % REPLICATION_FACTOR:
        raise ConfigError(
            file,
            key,
            f"with nvrx-local, workload.world_size a multiple of {REPLICATION_FACTOR} (NVRx's clique replication "
            f"splits the ranks into groups of its replication factor)",
            design,
        )


def unavailable(design: str, backend: str, device: str, world_size: int) -> str | None:
    """Why ``design`` cannot run on this machine (``auto`` backend and device resolved here), or None."""
    from bench.procs.machine import resolve_backend, resolve_device

    try:
        resolved = resolve_device(device, resolve_backend(backend, world_size))
    except RuntimeError:
        return None  # the runner says why the backend or the device cannot be had here
    return needs_gpu(design, resolved)
