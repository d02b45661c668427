"""A CUDA caching-allocator snapshot (``torch.cuda.memory._dump_snapshot``), read safely, to tables.

The snapshot is a pickle, and loading a pickle can run any code it names.
It is read with an unpickler that builds plain containers only (dicts,
lists, tuples, strings, numbers, booleans, None) and refuses every class or
function: a file that names one is one line of error, never executed.

Two tables: the allocator's actions over the recorded window
(``device_traces``: one row per alloc, free and segment action, with the
innermost Python frame that caused it) and the blocks held when the
snapshot was taken (``segments``).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import polars as pl

from kinetolens.errors import TraceError
from kinetolens.ingest.opener import check_trace_file

__all__ = ["ACTIONS_SCHEMA", "BLOCKS_SCHEMA", "read_snapshot", "snapshot_tables"]

ACTIONS_SCHEMA = {
    "device": pl.Int64, "seq": pl.Int64, "action": pl.String, "addr": pl.Int64, "size": pl.Int64,
    "stream": pl.Int64, "time_us": pl.Int64, "frame": pl.String,
}  # fmt: skip
BLOCKS_SCHEMA = {"device": pl.Int64, "segment": pl.Int64, "address": pl.Int64, "size": pl.Int64, "state": pl.String}


class _PlainOnly(pickle.Unpickler):
    """Builds plain containers; any class or function the pickle names is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}, and only plain data is read")


def read_snapshot(path: str | Path) -> dict[str, Any]:
    """The snapshot in ``path`` as plain data; a one-line :class:`TraceError` otherwise."""
    p = Path(path)
    check_trace_file(p)
    try:
        with p.open("rb") as fh:
            data = _PlainOnly(fh).load()
    except pickle.UnpicklingError as exc:
        raise TraceError(p, f"not a memory snapshot: {exc}") from None
    except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError, MemoryError) as exc:
        raise TraceError(p, f"not a memory snapshot: the pickle does not load ({type(exc).__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list) or not isinstance(data.get("device_traces"), list):
        raise TraceError(p, "not a memory snapshot: no 'segments' and 'device_traces' (write it with torch.cuda.memory._dump_snapshot)")
    return data


def _frame(frames: Any) -> str | None:
    """The innermost Python frame that is not torch's own, as ``file:line name``."""
    if not isinstance(frames, list):
        return None
    for f in frames:
        if isinstance(f, dict) and "/torch/" not in str(f.get("filename", "")):
            return f"{f.get('filename')}:{f.get('line')} {f.get('name')}"
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def snapshot_tables(data: dict[str, Any]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the allocator's actions, the blocks held at the snapshot) of ``data`` (:func:`read_snapshot`)."""
    actions = [
        {
            "device": device, "seq": seq, "action": str(e.get("action")), "addr": _int(e.get("addr")),
            "size": _int(e.get("size")), "stream": _int(e.get("stream")), "time_us": _int(e.get("time_us")),
            "frame": _frame(e.get("frames")),
        }  # fmt: skip
        for device, trace in enumerate(data["device_traces"])
        if isinstance(trace, list)
        for seq, e in enumerate(trace)
        if isinstance(e, dict)
    ]
    blocks = [
        {"device": _int(s.get("device")), "segment": _int(s.get("address")), "address": _int(b.get("address")),
         "size": _int(b.get("size")), "state": str(b.get("state"))}  # fmt: skip
        for s in data["segments"]
        if isinstance(s, dict) and isinstance(s.get("blocks"), list)
        for b in s["blocks"]
        if isinstance(b, dict)
    ]
    return pl.DataFrame(actions, schema=ACTIONS_SCHEMA), pl.DataFrame(blocks, schema=BLOCKS_SCHEMA)
