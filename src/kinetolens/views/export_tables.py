"""The trace model's tables written one file per table, for pandas, DuckDB or a spreadsheet.

Parquet keeps every type (categoricals, nullable integers) and is what to
use from code; CSV and JSON (an array of row objects) are for tools that
read nothing else.  ``trace.json`` beside them holds the file's metadata
(device properties, distributed info) and the loader's warnings, which are
not tables.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kinetolens import json_codec
from kinetolens.analysis.session import warnings_of
from kinetolens.errors import TraceError
from kinetolens.registry.table_formats import FORMATS
from kinetolens.model.trace import TABLES, Trace

METADATA_FILE = "trace.json"


def _plain(frame: pl.DataFrame) -> pl.DataFrame:
    """Categoricals as text, so CSV/JSON readers see the values, not codes."""
    return frame.with_columns(pl.col(pl.Categorical).cast(pl.String))


def write_tables(trace: Trace, out_dir: str | Path, fmt: str = "parquet") -> dict[str, Path]:
    """Write every table of ``trace`` into ``out_dir`` as ``TABLE.<fmt>``; returns table -> file."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown table format {fmt!r}; choose from {', '.join(FORMATS)}")
    out = Path(out_dir)
    written: dict[str, Path] = {}
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name in TABLES:
            frame: pl.DataFrame = getattr(trace, name)
            path = out / f"{name}.{fmt}"
            if fmt == "parquet":
                frame.write_parquet(path)
            elif fmt == "csv":
                _plain(frame).write_csv(path)
            else:
                path.write_bytes(json_codec.encode(_plain(frame)))
            written[name] = path
        meta = {
            "source": trace.path,
            "format": trace.format,
            "metadata": trace.metadata,
            "warnings": [{"kind": w.kind, "count": w.count, "detail": w.detail} for w in warnings_of(trace)],
            "rows": {name: getattr(trace, name).height for name in TABLES},
        }
        (out / METADATA_FILE).write_bytes(json_codec.encode(meta, indent=2))
    except OSError as exc:
        raise TraceError(out, f"cannot write tables ({exc.strerror or exc})") from None
    return written
