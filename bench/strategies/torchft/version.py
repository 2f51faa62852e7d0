"""Which torchft is installed, whether its DDP needs ftbench's workaround, and which
process group its Manager drives.

torchft 0.2.0's ``DistributedDataParallel`` kills the *survivors* when a peer dies
mid all-reduce (``assert fut._fut`` in its comm hook); torchft-nightly 2026.10.26 fixed
it (docs/facts.md). No torch import at module level: the harness asks before any trial;
the process-group functions import torch and torchft when called.

torchft-nightly's Manager reconfigures either of two groups: its own ``ProcessGroupGloo``
(a wrapper that builds a new gloo group on every quorum change, even under torch 2.15),
or a plain torch group created with ``enable_reconfigure=True`` (torch >= 2.14), which
torch reconfigures in place; under older torch torchft's ``ReconfigureOptions`` is a
stand-in of its own and only the first exists (``recovery.torchft.process_group``).
"""

from __future__ import annotations

import re
from typing import Any

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


# --- which process group torchft's Manager drives --------------------------------------

NATIVE_STORE_PREFIX = "torchft/native"
"""Prefix, in the launcher's store, under which the replicas' native gloo groups meet to
reconfigure (keys ``<prefix>/<group>/reconfigure/<quorum id>/...``)."""


def native_unsupported(backend: str) -> str | None:
    """Why torchft's Manager cannot be handed a native torch process group here, or None.

    Asked of the torch and torchft that ``import`` loads (the environment of the point):
    torch must reconfigure a group in place (``ProcessGroup.reconfigure``, torch 2.14 and
    later), and torchft's ``ReconfigureOptions`` must be torch's own, i.e. its Manager
    drives torch's reconfigure (torchft-nightly falls back to a stand-in of its own
    under older torch; torchft 0.2.0 has neither). ftbench builds the group on gloo only.
    Imports torch and torchft."""
    if backend != "gloo":
        return f"ftbench builds the native group on gloo only; this point runs on {backend}"
    import torch
    import torch.distributed as dist

    native = getattr(torch._C._distributed_c10d, "ReconfigureOptions", None)
    if native is None or not hasattr(dist.ProcessGroup, "reconfigure"):
        return (
            f"torch {torch.__version__} cannot reconfigure a process group in place "
            "(init_process_group(enable_reconfigure=True) needs torch >= 2.14)"
        )
    try:
        import torchft.process_group as tpg
    except ImportError as err:
        return f"torchft is not importable: {err}"
    if getattr(tpg, "ReconfigureOptions", None) is not native:
        version = torchft_version()
        return (
            f"{' '.join(version) if version else 'torchft'} does not drive torch's reconfigure "
            "(its ReconfigureOptions is not torch's)"
        )
    return None


def pg_path(requested: str, why_not_native: str | None) -> tuple[str, str]:
    """``(path, reason)``: the process group a replica builds for ``process_group =
    requested`` (``auto``, ``torchft`` or ``native``), ``why_not_native`` being
    :func:`native_unsupported`'s answer (None: the native path can run). ``native``
    where it cannot is a RuntimeError (the job's ``unavailable`` skips such points)."""
    if requested == "torchft":
        return "torchft", "process_group = torchft"
    if why_not_native is None:
        return "native", f"process_group = {requested}: torch and torchft reconfigure in place"
    if requested == "native":
        raise RuntimeError(f"recovery.torchft.process_group = native: {why_not_native}")
    return "torchft", f"process_group = auto: {why_not_native}"


def observe_pg(pg: object) -> dict[str, Any]:
    """What torchft's Manager will do with ``pg``, read off torchft's and torch's objects:
    ``path`` is ``torchft`` where ``pg`` is one of torchft's own process groups (the
    Manager rebuilds it through torchft's wrapper; it checks it with ``errored()``) and
    ``native`` where it is a plain torch group (reconfigured in place by torch; the Manager
    asks its backend's ``get_error()``): the same test torchft's ``should_commit`` makes.
    ``handle``: the kind of its reconfigure handle (``json``: torchft's own; ``gloo``:
    torch's native gloo handle). ``reconfigure_options``: ``torch`` where torchft's
    ``ReconfigureOptions`` is torch's own class, ``shim`` where it is torchft's stand-in
    (torch < 2.14), ``none`` where torchft has none (0.2.0). Imports torch and torchft.

    Asking torchft's own group for its handle starts the rendezvous store it hosts, which
    its Manager would otherwise start at the first quorum: call this before that quorum
    (the replica does, before training), not concurrently with it."""
    import torch
    import torchft.process_group as tpg

    try:
        handle = str(pg.get_reconfigure_handle())  # type: ignore[attr-defined]
        kind = "json" if handle.lstrip().startswith("{") else handle.split(":", 1)[0]
    except Exception as err:  # a group that has no handle: recorded, not fatal
        kind = f"none ({type(err).__name__})"
    options = getattr(tpg, "ReconfigureOptions", None)
    native = getattr(torch._C._distributed_c10d, "ReconfigureOptions", None)
    return {
        "path": "torchft" if isinstance(pg, tpg.ProcessGroup) else "native",
        "pg_class": f"{type(pg).__module__}.{type(pg).__qualname__}",
        "handle": kind,
        "reconfigure_options": "none" if options is None else "torch" if options is native else "shim",
        "reconfigure_options_class": "" if options is None else f"{options.__module__}.{options.__qualname__}",
    }
