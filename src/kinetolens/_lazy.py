"""A package's public names, each imported from its module when first asked for.

``import kinetolens`` (and ``kinetolens.runs``) must not import polars, the
analyzer or the executors: a training process that only captures, or a
command that reads one trace, never needs them (PEP 562 module ``__getattr__``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, names: dict[str, str], namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps each public
    name to the module defining it; a name once imported is kept in
    ``namespace`` (the package's globals), so later lookups skip the hook."""

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        """The public names only: no helpers, no submodules imported so far."""
        return sorted(namespace.get("__all__", names))

    return getattr_, dir_
