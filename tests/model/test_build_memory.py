"""The model build's peak, guarded by structure rather than by RSS: the
reader's host table (one chunk per piece of the file) is split into ops,
runtime calls and Python frames without first being copied into one chunk,
and the split is the rows a filter and a sort would give."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from kinetolens.ingest import read_raw
from kinetolens.ingest.categories import ANNOTATION, OP, RUNTIME, SYNC
from kinetolens.model import build
from tests.conftest import trace_path

RESOLVER = "hta/df_index_resolver/df_index_resolver.json.gz"


def test_host_table_is_taken_without_a_copy_into_one_chunk() -> None:
    raw = read_raw(trace_path(RESOLVER))
    pieces = raw.host.get_column("ts").n_chunks()
    assert pieces > 10, "the reader should hand over one chunk per piece of a 54 MB file"
    rows = raw.host.height
    host = build._take_host(raw)
    assert raw.host.height == 0  # taken: the caller holds the only reference
    # The added end and thread key are chunked as the reader's columns are, and
    # those are still the reader's chunks: no column was copied into one chunk.
    assert host.height == rows
    assert {host.get_column(c).n_chunks() for c in ("ts", "dur", "name", "end", "group")} == {pieces}
    assert host.get_column("end").equals(host.get_column("ts") + host.get_column("dur"))


def test_split_is_the_filtered_and_sorted_rows() -> None:
    raw = read_raw(trace_path(RESOLVER))
    host = build._take_host(raw)
    reference = {
        "ops": host.filter(pl.col("kind").is_in([OP, ANNOTATION])).sort(["ts", "dur"], descending=[False, True], maintain_order=True),
        "runtime": host.filter(pl.col("kind").is_in([RUNTIME, SYNC])).sort("ts", maintain_order=True).select(build.RUNTIME_COLUMNS),
    }
    parts = build._split_rows(
        host,
        {
            "ops": (pl.col("kind").is_in([OP, ANNOTATION]), True, None),
            "runtime": (pl.col("kind").is_in([RUNTIME, SYNC]), False, build.RUNTIME_COLUMNS),
        },
    )
    assert parts["ops"].height == 58_715 and parts["runtime"].height == 42_373
    for name, want in reference.items():
        assert_frame_equal(parts[name], want)


def test_device_table_is_taken_and_its_rows_kept() -> None:
    # The build takes the reader's device table out of the raw tables, so
    # that it can be let go once kernels and device events are copied out
    # (held through the steps it was a second kernels table at the build's peak).
    raw = read_raw(trace_path(RESOLVER))
    rows = raw.device.height
    trace = build.build_trace(raw, RESOLVER)
    assert raw.device.height == 0
    assert trace.kernels.height + trace.device_events.height == rows > 0


def test_kernels_are_numbered_in_launch_order_within_their_op() -> None:
    # sub: each op call's kernels 0, 1, ... by launch time (table order among
    # equal times); null for a kernel without an op.
    kernels = build.build_trace(read_raw(trace_path(RESOLVER)), RESOLVER).kernels.with_row_index("row")
    with_op = kernels.filter(pl.col("op_id").is_not_null())
    assert kernels.filter(pl.col("op_id").is_null())["sub"].null_count() == kernels.height - with_op.height
    want = with_op.sort(pl.col("launch_ts").fill_null(pl.col("ts")), "row").with_columns(
        want=pl.int_range(pl.len()).over("op_id")
    )
    assert want.height > 10_000 and want.select((pl.col("sub") == pl.col("want")).all()).item()
    assert with_op.group_by("op_id").len()["len"].max() > 2  # ops with several kernels are in it


def _text_bytes(column: pl.Series) -> int:
    """Bytes of the texts a string column's views point into (not the 16-byte views)."""
    exported = column.to_arrow(compat_level=pl.CompatLevel.newest())
    chunks = getattr(exported, "chunks", [exported])
    return sum(b.size for chunk in chunks for b in chunk.buffers()[2:] if b is not None)


def test_kernel_names_keep_sharing_their_texts() -> None:
    # The reader stores each distinct kernel name once per piece of the file;
    # the split into kernels gathered over the pieces' chunks, which copied
    # every row's name (a 500 MB trace: 53 MiB instead of 3).
    trace = build.build_trace(read_raw(trace_path(RESOLVER)), RESOLVER)
    names = trace.kernels.get_column("name")
    each_row = int(names.str.len_bytes().sum())
    assert each_row > 4_000_000
    assert _text_bytes(names) < each_row / 10
