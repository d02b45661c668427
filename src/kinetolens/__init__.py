"""kinetolens: where the time of a PyTorch job goes, kernel by kernel.

``kinetolens.load(path)`` returns a :class:`~kinetolens.model.Trace` whose
tables are polars DataFrames.  Capture (``kinetolens.profile``) is the only
part that imports torch, and only when used.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

from kinetolens._allocator import configure_allocator

configure_allocator()  # before anything imports polars

from kinetolens.errors import TraceError, TraceWarning
from kinetolens.loader import load
from kinetolens.model import Trace

__all__ = ["Trace", "TraceError", "TraceWarning", "__version__", "load", "nvtx", "profile", "step"]


def __getattr__(name: str) -> Any:
    # Capture needs torch; import it only when someone asks for it.
    if name in ("profile", "step", "nvtx"):
        from kinetolens import capture

        return getattr(capture, name)
    raise AttributeError(f"module 'kinetolens' has no attribute {name!r}")
