"""Named plug-ins (workloads, strategies, fault kinds) in registries that refuse duplicates.

A plug-in is declared by its name, the dataclass of its scenario knobs and the dotted
path of its implementation. The implementation is imported only when a trial needs it,
so that ``ftbench list`` and ``ftbench validate`` never pay for ``import torch``.

Registries fill themselves: the first lookup imports every module of the plug-in
packages (``bench.workloads``, ``bench.strategies``, ``bench.scenario.faults``), each of
which registers what it declares, and then the modules named in ``$FTBENCH_PLUGINS``
(comma-separated, importable from ``sys.path``, like anything on ``PYTHONPATH``). So a
new strategy, workload or fault kind is one new folder or file and no edit elsewhere.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

P = TypeVar("P", bound="Plugin")

#: Packages that declare plug-ins, and whether only their subpackages do (one folder
#: per workload or strategy, beside shared modules) or every module (one file per
#: family of fault kinds).
PLUGIN_PACKAGES = (("bench.scenario.faults", False), ("bench.workloads", True), ("bench.strategies", True))
#: Environment variable naming extra plug-in modules (a test's, a user's).
PLUGINS_ENV = "FTBENCH_PLUGINS"


@dataclass(frozen=True, kw_only=True, slots=True)
class Plugin:
    name: str
    """The name scenario files use (``kind = "..."`` or ``strategy = "..."``)."""
    params: type
    """Dataclass of the plug-in's own scenario knobs (validated like every other key)."""
    impl: str
    """``module:attribute`` of the implementation, imported on first use."""
    summary: str
    """One line for ``ftbench list`` and error messages."""

    def load(self) -> Any:
        return load_path(self.impl)


def load_path(path: str) -> Any:
    """The object at ``module:attribute``."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


class Registry(Generic[P]):
    """A name -> plug-in mapping; registering a name twice is a programming error."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._items: dict[str, P] = {}

    def register(self, plugin: P) -> P:
        if plugin.name in self._items:
            raise ValueError(f"{self.what} {plugin.name!r} is already registered")
        self._items[plugin.name] = plugin
        return plugin

    def _all(self) -> dict[str, P]:
        discover()
        return self._items

    def __getitem__(self, name: str) -> P:
        return self._all()[name]

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def names(self) -> list[str]:
        return sorted(self._all())

    def choices(self) -> str:
        """``'a', 'b' or 'c'``: for 'expected one of ...' messages."""
        quoted = [repr(n) for n in self.names()]
        return ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]


_discovered = False


def discover() -> None:
    """Import every plug-in module (see the module docstring); Python imports each once."""
    global _discovered
    if not _discovered:
        _discovered = True  # first: plug-in modules look names up in registries while they import
        for package, folders_only in PLUGIN_PACKAGES:
            pkg = importlib.import_module(package)
            for info in pkgutil.iter_modules(pkg.__path__):
                if info.ispkg or not folders_only:
                    importlib.import_module(f"{package}.{info.name}")
    for name in os.environ.get(PLUGINS_ENV, "").split(","):
        if name.strip():
            importlib.import_module(name.strip())
