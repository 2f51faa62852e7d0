"""What a restarted job does between its new process group and its first step, as the
probe sees it: its model wrapped for data parallelism (``build``) and its checkpoint
loaded (``restore``), the phases ftbench's own instrumented restart names the same way.

A job ftbench did not write announces neither, so the probe brackets the public calls
that do them, their behaviour unchanged:

- ``model_wrapped`` when the constructor of ``DistributedDataParallel`` or of FSDP's
  ``FullyShardedDataParallel`` returns, and after each ``fully_shard`` (FSDP2 shards
  module by module; the last call, the root's, ends the phase);
- ``restore_start`` and ``restore_end`` around ``torch.load`` and
  ``torch.distributed.checkpoint``'s ``load`` (and its older ``load_state_dict``), with
  the bytes of the file or checkpoint folder the call names, where it names one.

Only the outermost call of a kind in a thread is bracketed: DCP reads some of its items
with ``torch.load``, and FSDP's constructor wraps submodules in FSDP. Each hook is put
in as the module that defines the call is imported, before anything imports the name
from it (``torch`` binds ``torch.load`` from ``torch.serialization`` that way), so the
job's own references are the wrapped ones. A call that raises goes on untouched and
writes no end.

This module knows nothing of the probe: it is given the function that writes an event,
which never raises.
"""

from __future__ import annotations

import functools
import os
import stat
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

Emit = Callable[..., Any]
Sized = Callable[[tuple[Any, ...], dict[str, Any]], Any]
"""The object a call reads from (a path, an open file, a storage reader), from its arguments."""

_inside = threading.local()
"""Per thread, the kinds of call being bracketed now: a nested one of a kind is not."""


def bracket(
    owner: Any,
    name: str,
    *,
    kind: str,
    emit: Emit,
    start: str | None,
    end: str,
    how: str,
    source: Sized | None = None,
) -> None:
    """Wrap ``owner.name`` (a module's function, a class's ``__init__``) so that its
    outermost call of ``kind`` in a thread writes ``start`` before it and ``end`` once it
    returns; ``source`` finds what it read, whose size goes on ``end`` as ``bytes``."""
    original = getattr(owner, name, None)
    if original is None or getattr(original, "_ftbench_wrapped", False):
        return

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        active: set[str] | None = getattr(_inside, "kinds", None)
        if active is None:
            active = _inside.kinds = set()
        if kind in active:
            return original(*args, **kwargs)
        active.add(kind)
        try:
            if start:
                emit(start, how=how)
            result = original(*args, **kwargs)
        finally:
            active.discard(kind)
        size = _size(source, args, kwargs) if source is not None else None
        emit(end, how=how, **({} if size is None else {"bytes": size}))
        return result

    call._ftbench_wrapped = True  # type: ignore[attr-defined]
    setattr(owner, name, call)
    _rebind(owner, name, original, call)


def _rebind(owner: Any, name: str, original: Any, wrapped: Any) -> None:
    """Point the packages that already re-exported ``name`` at the wrapped call (the
    probe started after they were imported, which is rare)."""
    if not isinstance(owner, ModuleType):
        return
    parts = owner.__name__.split(".")
    for i in range(1, len(parts)):
        parent = sys.modules.get(".".join(parts[:i]))
        if parent is not None and getattr(parent, name, None) is original:
            setattr(parent, name, wrapped)


def _size(source: Sized, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """Bytes of a file, an open file, or a checkpoint folder (its files, every rank's);
    None for anything else, or where it cannot be read."""
    try:
        what = source(args, kwargs)
        what = getattr(what, "path", what)  # DCP's FileSystemReader names its folder
        if isinstance(what, (str, os.PathLike)):
            path = os.fspath(what)
            info = os.stat(path)
            if stat.S_ISDIR(info.st_mode):
                with os.scandir(path) as entries:
                    return sum(e.stat().st_size for e in entries if e.is_file())
            return info.st_size if stat.S_ISREG(info.st_mode) else None
        fileno = getattr(what, "fileno", None)
        return os.fstat(fileno()).st_size if callable(fileno) else None
    except Exception:
        return None


def _argument(position: int, keyword: str) -> Sized:
    return lambda args, kwargs: args[position] if len(args) > position else kwargs.get(keyword)


def _ddp(module: ModuleType, emit: Emit) -> None:
    bracket(
        module.DistributedDataParallel,
        "__init__",
        kind="build",
        emit=emit,
        start=None,
        end="model_wrapped",
        how="DistributedDataParallel",
    )


def _fsdp(module: ModuleType, emit: Emit) -> None:
    bracket(
        module.FullyShardedDataParallel,
        "__init__",
        kind="build",
        emit=emit,
        start=None,
        end="model_wrapped",
        how="FullyShardedDataParallel",
    )


def _fully_shard(module: ModuleType, emit: Emit) -> None:
    bracket(module, "fully_shard", kind="build", emit=emit, start=None, end="model_wrapped", how="fully_shard")


def _torch_load(module: ModuleType, emit: Emit) -> None:
    bracket(
        module,
        "load",
        kind="restore",
        emit=emit,
        start="restore_start",
        end="restore_end",
        how="torch.load",
        source=_argument(0, "f"),
    )


def _dcp_load(module: ModuleType, emit: Emit) -> None:
    folder: Sized = lambda args, kwargs: kwargs.get("checkpoint_id") or kwargs.get("storage_reader")
    for name, source in (("load", folder), ("load_state_dict", _argument(1, "storage_reader"))):
        bracket(
            module,
            name,
            kind="restore",
            emit=emit,
            start="restore_start",
            end="restore_end",
            how=f"torch.distributed.checkpoint.{name}",
            source=source,
        )


HOOKS: dict[str, Callable[[ModuleType, Emit], None]] = {
    "torch.nn.parallel.distributed": _ddp,
    "torch.distributed.fsdp.fully_sharded_data_parallel": _fsdp,
    "torch.distributed.fsdp._fully_shard._fully_shard": _fully_shard,
    "torch.distributed._composable.fsdp.fully_shard": _fully_shard,  # FSDP2 before torch 2.6
    "torch.serialization": _torch_load,
    "torch.distributed.checkpoint.state_dict_loader": _dcp_load,
}
"""Module -> what the probe wraps in it once it is loaded (:data:`ftbench_probe.HOOKS`)."""
