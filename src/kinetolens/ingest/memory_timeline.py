"""torch's raw memory timeline: ``profile.export_memory_timeline("x.raw.json.gz")``.

The file is a JSON list of ``[timestamp_ns, action, bytes, category]`` for one
device (the file does not say which).  Unlike Kineto's ``[memory]`` events it
has no addresses and no ops; instead each tensor is classified (parameter,
gradient, activation...) by torch's memory profiler.  Actions: 1 tensor alive
before profiling (timestamp -1), 2 created, 3 a new version changed its
category (written as a negative row for the old category and a positive one
for the new), 4 destroyed (negative bytes).

This reads it into a memory-like table: ``seq`` (file order), ``ts`` (ns;
pre-existing tensors get the first real timestamp), ``action``, ``bytes`` and
``category``; :func:`kinetolens.analysis.memory.usage.category_timeline` turns it
into a curve.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import msgspec
import polars as pl

from kinetolens.errors import TraceError

#: Index order of ``torch.profiler._memory_profiler._CATEGORY_TO_INDEX``;
#: the last one is tensors torch could not classify.
CATEGORIES = (
    "parameter",
    "optimizer_state",
    "input",
    "temporary",
    "activation",
    "gradient",
    "autograd_detail",
    "unknown",
)
ACTIONS = {1: "preexisting", 2: "create", 3: "increment_version", 4: "destroy"}


def _read_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
        return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TraceError(path, f"cannot read: {exc}") from None


def is_memory_timeline(path: str | Path) -> bool:
    """Whether the file is a raw timeline: a JSON list of lists, where a
    Kineto trace is a JSON object."""
    p = Path(path)
    if not p.is_file():
        return False
    try:
        with p.open("rb") as fh:
            head = fh.read(2)
        opener = gzip.open if head == b"\x1f\x8b" else open
        with opener(p, "rb") as fh:
            start = fh.read(64).lstrip()
    except (OSError, EOFError, gzip.BadGzipFile):
        return False
    return start.startswith(b"[[") or start.replace(b" ", b"") == b"[]"


def read_memory_timeline(path: str | Path) -> pl.DataFrame:
    """The raw timeline as a table (see the module docstring)."""
    p = Path(path)
    try:
        rows = msgspec.json.decode(_read_bytes(p), type=list[tuple[int, int, int, int]])
    except msgspec.DecodeError as exc:
        raise TraceError(p, f"not a raw memory timeline ([timestamp, action, bytes, category] rows): {exc}") from None
    if not rows:
        raise TraceError(p, "the memory timeline is empty")
    frame = pl.DataFrame(rows, schema=["ts", "action", "bytes", "category"], orient="row")
    bad = frame.filter(~pl.col("action").is_in(list(ACTIONS)) | ~pl.col("category").is_between(0, len(CATEGORIES) - 1))
    if bad.height:
        row = bad.row(0, named=True)
        raise TraceError(p, f"{bad.height} rows with an unknown action or category, first {row}")
    first = frame.filter(pl.col("ts") >= 0)["ts"].min()
    return frame.with_row_index("seq").select(
        pl.col("seq").cast(pl.Int64),
        pl.when(pl.col("ts") < 0).then(pl.lit(first)).otherwise(pl.col("ts")).cast(pl.Int64).alias("ts"),
        pl.col("action").replace_strict(ACTIONS, return_dtype=pl.String),
        pl.col("bytes").cast(pl.Int64),
        pl.col("category").replace_strict(dict(enumerate(CATEGORIES)), return_dtype=pl.String),
    )
