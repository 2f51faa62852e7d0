"""Named plug-ins (workloads, strategies, fault kinds) in registries that refuse duplicates.

A plug-in is declared by its name, the dataclass of its scenario knobs and the dotted
path of its implementation. The implementation is imported only when a trial needs it,
so that ``ftbench list`` and ``ftbench validate`` never pay for ``import torch``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

P = TypeVar("P", bound="Plugin")


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
        module, _, attr = self.impl.partition(":")
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

    def __getitem__(self, name: str) -> P:
        return self._items[name]

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def names(self) -> list[str]:
        return sorted(self._items)

    def choices(self) -> str:
        """``'a', 'b' or 'c'``: for 'expected one of ...' messages."""
        quoted = [repr(n) for n in self.names()]
        return ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]
