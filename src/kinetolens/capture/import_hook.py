"""Run a callback right after a module finishes importing.

``kinetolens run`` sets itself up at interpreter start (from sitecustomize),
before the script runs.  Importing torch there would run before the script's
own environment setup and would load torch into processes that never use it,
so instead we wait for the script's own ``import torch``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType


class _AfterImport(importlib.abc.MetaPathFinder):
    """A one-shot finder: lets the normal finders locate ``name``, then wraps
    the loader's ``exec_module`` so ``callback`` runs once the module body has
    completed."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        # Leave first, so the lookup below cannot recurse into us.
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module
        callback = self.callback

        def exec_then_notify(module: ModuleType) -> None:
            exec_module(module)
            callback(module)

        loader.exec_module = exec_then_notify  # type: ignore[method-assign]
        return spec


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once top-level module ``name`` is imported
    (immediately if it already is)."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    sys.meta_path.insert(0, _AfterImport(name, callback))
