"""kinetolens' run metadata beside a trace (``*.kinetolens.json``).

Kineto traces do not say which torch build wrote them; ``kinetolens.profile``
records it (with the CUDA and Python versions, command line and host) in
this file, so comparisons of two runs can tell whether the software changed.
The file is optional: a missing, unreadable or malformed one means the trace
is read without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from kinetolens.formats import metadata_name


def read_run_metadata(trace: Path) -> dict[str, Any] | None:
    """The run metadata written beside ``trace``, or None where there is none to read."""
    path = trace.with_name(metadata_name(trace.name))
    try:
        data = msgspec.json.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    return data if isinstance(data, dict) else None
