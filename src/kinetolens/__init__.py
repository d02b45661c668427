"""kinetolens: where the time of a PyTorch job goes, kernel by kernel.

``kinetolens.load(path)`` returns a :class:`~kinetolens.model.Trace` whose
tables are polars DataFrames.  Capture (``kinetolens.profile``) is the only
part that imports torch, and only when used.

Every name here loads on first use: a training process that only captures
(``kinetolens.profile``) imports neither polars nor any of the analyzer, and
importing kinetolens changes nothing in the process or its environment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinetolens._lazy import lazy_names

__version__ = "0.1.0"

#: Public name -> the module that defines it, imported when first asked for.
_LAZY = {
    "load": "kinetolens.loader",
    "Trace": "kinetolens.model.trace",
    "TraceError": "kinetolens.errors",
    "TraceWarning": "kinetolens.errors",
    "profile": "kinetolens.capture",
    "step": "kinetolens.capture",
    "nvtx": "kinetolens.capture",
    "tune_allocator": "kinetolens._allocator",
}

__all__ = ["Trace", "TraceError", "TraceWarning", "__version__", "load", "nvtx", "profile", "step", "tune_allocator"]

if TYPE_CHECKING:
    from kinetolens._allocator import tune_allocator
    from kinetolens.capture import nvtx, profile, step
    from kinetolens.errors import TraceError, TraceWarning
    from kinetolens.loader import load
    from kinetolens.model.trace import Trace


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
