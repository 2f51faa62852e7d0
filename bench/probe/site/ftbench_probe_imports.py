"""How the probe's hooks get into a job: each as the job imports the module it belongs
to, right after the module's own code ran and before anything imports a name from it
(so that ``from torch.serialization import load`` in ``torch`` binds the wrapped one).

A meta path finder that finds nothing itself: it hands those modules to their own
loaders, wrapped so that the hook runs once the module is loaded; nothing is imported
on the probe's account. It knows nothing of the probe: it is given the hooks (already
guarded, so that a failing hook turns the probe off, never the job) and whether the
probe is still on.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

Hook = Callable[[ModuleType], Any]


class HookLoader(importlib.abc.Loader):
    """The module's own loader, then the hook for it."""

    def __init__(self, inner: importlib.abc.Loader, hook: Hook) -> None:
        self.inner, self.hook = inner, hook

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        self.hook(module)

    def __getattr__(self, name: str) -> Any:
        """Everything else is the module's own loader's (``get_source``, ``is_package``...)."""
        return getattr(self.inner, name)


class HookFinder(importlib.abc.MetaPathFinder):
    """Hands the modules in ``hooks`` to their own loaders, wrapped, while ``on()``."""

    def __init__(self, hooks: Mapping[str, Hook], on: Callable[[], bool]) -> None:
        self.hooks, self.on = hooks, on

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        hook = self.hooks.get(fullname)
        if hook is None or not self.on():
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target) if find else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = HookLoader(spec.loader, hook)
                return spec
        return None
