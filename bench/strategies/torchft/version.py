"""Which torchft is installed, and whether its DDP needs ftbench's workaround.

torchft 0.2.0's ``DistributedDataParallel`` kills the *survivors* when a peer dies
mid all-reduce (``assert fut._fut`` in its comm hook); torchft-nightly 2026.10.26 fixed
it (docs/facts.md). No torch import here: the harness asks before any trial.
"""

from __future__ import annotations

import re

from bench.procs.machine import provider

#: The first torchft-nightly whose DDP returns a failed bucket unchanged.
FIXED_NIGHTLY = (2026, 10, 26)
#: The last release known to kill survivors from its DDP comm hook.
BROKEN_RELEASE = (0, 2, 0)


def torchft_version() -> tuple[str, str] | None:
    """(distribution, version) of the torchft that ``import torchft`` would load, or None
    (``torchft`` and ``torchft-nightly`` provide the same package)."""
    return provider("torchft", "torchft", "torchft-nightly")


def ddp_workaround_needed(version: tuple[str, str] | None, mode: str) -> bool:
    """Whether to replace TorchFT's DDP comm hook (see ``replica.ddp_class``).

    ``auto`` applies it to releases up to 0.2.0 and nightlies before the fix, and to
    versions it cannot read; later versions run their own hook untouched.
    """
    if mode in ("on", "off"):
        return mode == "on"
    if version is None:
        return True
    name, text = version
    parts = tuple(int(p) for p in re.findall(r"\d+", text)[:3])
    if len(parts) < 3:
        return True
    return parts < FIXED_NIGHTLY if "nightly" in name.lower() else parts <= BROKEN_RELEASE
