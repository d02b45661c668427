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
from kinetolens.ingest.text_repair import is_text_error, repair_json_text


def read_run_metadata(trace: Path) -> dict[str, Any] | None:
    """The run metadata written beside ``trace``, or None where there is none to read."""
    path = trace.with_name(metadata_name(trace.name))
    try:
        text = path.read_bytes()
    except OSError:
        return None
    try:
        data = msgspec.json.decode(text)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        if not is_text_error(exc):
            return None
        # A command line with a file name that is not UTF-8 (json.dump wrote
        # it as a lone surrogate escape): kept, with U+FFFD.
        try:
            data = msgspec.json.decode(repair_json_text(text).data)
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None
    return data if isinstance(data, dict) else None
