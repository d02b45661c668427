"""What goes with a trace file: the graph capture trace it pairs with, and
the key and folder of its cache entry.  Read by the loader and by a
result read back from the cache alike, so nothing here imports polars."""

from __future__ import annotations

import json
from pathlib import Path

from kinetolens.cache import cache_key, default_cache_dir, key_of
from kinetolens.errors import TraceError, TraceWarning, shown_path
from kinetolens.formats import CAPTURE_DETAILS, CAPTURE_DIR


def pairs_with_capture(path: Path, capture: str | Path | bool | None) -> bool:
    """Whether a load of ``path`` pairs it with a graph capture trace: one
    given, or a ``capture_traces/`` folder with its details beside it."""
    if capture is False:
        return False
    if capture is None or capture is True:
        return (path.parent / CAPTURE_DIR / CAPTURE_DETAILS).is_file()
    return True


def capture_file(path: Path, capture: str | Path | bool | None) -> tuple[Path | None, TraceWarning | None]:
    """The capture trace to pair ``path`` with, and a warning when the one
    found beside it cannot be used (an explicit ``capture`` that cannot be
    used raises :class:`TraceError` instead)."""
    if not pairs_with_capture(path, capture):
        return None, None
    if capture is None or capture is True:
        try:
            return _capture_in(path.parent / CAPTURE_DIR), None
        except TraceError as err:
            return None, TraceWarning("graph capture trace not used", 1, str(err))
    cp = Path(capture)
    if not cp.exists():
        raise TraceError(cp, "no such capture trace")
    return (_capture_in(cp) if cp.is_dir() else cp), None


def _capture_in(folder: Path) -> Path:
    """The capture trace in ``folder``: the one ``execution_details.json``
    names, else its only Kineto trace."""
    details = folder / CAPTURE_DETAILS
    if details.is_file():
        try:
            entries = json.loads(details.read_bytes())
        except (OSError, ValueError) as err:
            raise TraceError(details, f"unreadable: {err}") from None
        entries = entries if isinstance(entries, list) else [entries]
        names = [e.get("file") for e in entries if isinstance(e, dict) and isinstance(e.get("file"), str)]
        if not names:
            raise TraceError(details, "names no capture trace (no \"file\" entry)")
        named = folder / names[0]
        if not named.is_file():
            raise TraceError(details, f"names {names[0]}, which is not in {shown_path(folder)}")
        return named
    traces = sorted(f for f in folder.iterdir() if f.name.endswith((".json", ".json.gz")))
    if len(traces) != 1:
        raise TraceError(folder, f"holds {len(traces)} trace files and no {CAPTURE_DETAILS}; name the capture trace")
    return traces[0]


def entry_key(path: Path, capture_path: Path | None) -> str:
    """The cache key of ``path`` (paired with ``capture_path``, if any)."""
    key = cache_key(path)
    if capture_path is not None:
        key = key_of(f"{key}|capture|{cache_key(capture_path)}")
    return key


def cache_dir_of(cache: bool | str | Path) -> Path | None:
    return None if cache is False else default_cache_dir() if cache is True else Path(cache)
