"""The terminal and JSON views of ``kinetolens memory``: the peaks, the ops
that allocate, leaks, samples, a raw memory timeline's and an allocator
snapshot's peaks, and the memory-flow picture (the command itself is
:mod:`kinetolens.cli.memory_command`)."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl
from rich import box
from rich.table import Table
from rich.text import Text

from kinetolens.analysis.memory.allocations import pairable
from kinetolens.analysis.memory.basis import BASIS_NOTES, WINDOW_SUM
from kinetolens.analysis.memory.snapshot import snapshot_peaks
from kinetolens.analysis.memory.usage import category_peak, category_timeline
from kinetolens.cli.render import console as render_console
from kinetolens.cli.render import emit, emit_json, print_heading
from kinetolens.errors import TraceError
from kinetolens.ingest.memory_snapshot import read_snapshot, snapshot_tables
from kinetolens.ingest.memory_timeline import read_memory_timeline
from kinetolens.registry.words import counted
from kinetolens.views import units
from kinetolens.views.memory_flow_svg import render_memory_flow


def _bytes_columns(frame: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """Byte counts as ``12.3 MiB`` strings for the terminal."""
    return frame.with_columns(
        pl.col(c).map_elements(units.memory, return_dtype=pl.String) for c in columns if c in frame.columns
    )


def _since(column: str, origin: int) -> pl.Expr:
    return ((pl.col(column) - origin) / 1e6).round(3).alias(f"{column}_ms")


def write_svg(trace: str, path: str, events: pl.DataFrame, peaks: pl.DataFrame, allocs: pl.DataFrame) -> str:
    """One device per picture: the one chosen with --device, else the one with the highest peak."""
    if not pairable(events):
        raise TraceError(trace, f"its memory events carry no addresses (PyTorch < 1.10), so there is no memory-flow picture ({path} not written)")
    label = str(peaks["device"][0])
    mine = events.filter(pl.col("device") == label)
    window = (int(mine["ts"].min()), int(mine["ts"].max()))  # type: ignore[arg-type]
    peak = units.memory(peaks["peak_allocated"][0])
    svg = render_memory_flow(
        allocs.filter(pl.col("device") == label),
        window=window,
        title=f"memory flow, {label} (peak allocated {peak}): {Path(trace).name}",
    )
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(svg, encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None
    return label


def print_summary(
    trace: str,
    events: pl.DataFrame,
    peaks: pl.DataFrame,
    stats: pl.DataFrame,
    allocs: pl.DataFrame,
    leaked: pl.DataFrame,
    origin: int,
    top: int,
) -> None:
    console = render_console()
    table = peaks.select(
        "device",
        pl.col("peak_allocated").alias("peak"),
        pl.when(pl.col("basis") == WINDOW_SUM).then(pl.lit("window")).otherwise(pl.lit("all")).alias("counts"),
        pl.col("live_at_start").alias("at_start"),
        pl.col("peak_reserved").alias("reserved"),
        pl.col("final_allocated").alias("final"),
        pl.col("allocations").alias("allocs"),
        "frees",
    )
    shown = _bytes_columns(table, ["peak", "reserved", "final", "at_start"])
    print_heading(console, f"memory peaks (allocated bytes): {trace}")  # the path cut in the middle, not folded
    grid = Table(header_style="bold", box=box.SIMPLE_HEAD, collapse_padding=True)
    for name in shown.columns:
        grid.add_column(name, justify="left" if name in ("device", "counts") else "right", no_wrap=True)
    for row in shown.iter_rows():
        grid.add_row(*(Text("-" if v is None else f"{v:,}" if isinstance(v, int) else str(v)) for v in row))
    console.print(grid)
    at = peaks.select("device", _since("peak_ts", origin).alias("at_ms"), "peak_op", "peak_module")
    for device, at_ms, op, module in at.iter_rows():
        where = f" in {op}" if op else ""
        where += f" ({module})" if module else ""
        console.print(f"{device} peak at {at_ms:,.3f} ms from the first memory event{where}", markup=False,
                      highlight=False)
    if (peaks["basis"] != WINDOW_SUM).any():
        console.print("counts all: everything alive on the device; at_start: what was alive when profiling started.",
                      markup=False, highlight=False)
    if (peaks["basis"] == WINDOW_SUM).any():
        console.print(f"counts window: {BASIS_NOTES[WINDOW_SUM]} (the CPU allocator, and GPU traces without "
                      "allocator totals, count from 0 when profiling starts).", markup=False, highlight=False)
    ops = stats.head(top).select(
        "device",
        "op",
        "calls",
        pl.col("self_alloc_count").alias("allocs"),
        pl.col("self_alloc_bytes").alias("allocated"),
        pl.col("self_increase_bytes").alias("increase"),
        pl.col("alloc_bytes").alias("incl_allocated"),
        pl.col("increase_bytes").alias("incl_increase"),
    )
    emit(_bytes_columns(ops, ["allocated", "increase", "incl_allocated", "incl_increase"]),
         title=f"top {counted(top, 'op')} by bytes they allocate themselves (incl_: with nested ops)")
    if not pairable(events):
        console.print("leaks: the memory events carry no addresses (PyTorch < 1.10), so allocations cannot be "
                      "paired with their frees.")
        return
    if leaked.height == 0:
        console.print(f"leaks: none; all {counted(allocs.height, 'allocation')} in the window were freed in it.")
        return
    emit(_bytes_columns(leaked.head(top), ["bytes", "largest"]),
         title="not freed inside the window: alive_at_end (still held at the end) / "
               "before_window (freed, allocated before profiling began)")


def samples_only_report(trace: str, samples: pl.DataFrame, sampled: pl.DataFrame, json_: bool) -> None:
    """A trace captured with sample_rate but without profile_memory: the samples are all there is."""
    origin = int(samples["ts"].min())  # type: ignore[arg-type]
    if json_:
        emit_json({
            "trace": trace, "origin_ns": origin, "pairable": False, "devices": [], "op_stats": [], "leaks": [],
            "allocations": [], "curve": [], "sampled": sampled, "samples": samples,
        })  # fmt: skip
        return
    render_console().print(f"{trace}: no [memory] events (profile_memory=True was off); memory samples only.", markup=False)
    print_sampled(sampled, origin)


def print_sampled(sampled: pl.DataFrame, origin: int) -> None:
    """The "Sampled memory (every N ops)" section; nothing for a trace without samples."""
    if sampled.height == 0:
        return
    rates = sampled["every_n_ops"].drop_nulls().unique().sort().to_list()
    every = f"every {'/'.join(str(r) for r in rates)} ops" if rates else "sample rate not recorded"
    table = sampled.select(
        "device",
        "samples",
        "ops",
        pl.col("min_allocated").alias("min"),
        pl.col("max_allocated").alias("peak"),
        _since("peak_ts", origin).alias("peak_at_ms"),
        pl.col("peak_reserved").alias("reserved"),
    )
    emit(_bytes_columns(table, ["min", "peak", "reserved"]), title=f"Sampled memory ({every})")
    render_console().print("samples: cuda = the caching allocator's allocated/reserved bytes, cpu = the process's "
                    "resident set size; ops = ops dispatched up to the last sample; peak_at_ms from the first "
                    "memory event.", markup=False, highlight=False)


def timeline_report(trace: str, json_: bool) -> None:
    """torch's raw memory timeline has categories but no addresses or ops."""
    timeline = category_timeline(read_memory_timeline(trace))
    peak = category_peak(timeline)
    if json_:
        emit_json({"trace": trace, "format": "torch_memory_timeline_raw", "peak": peak, "timeline": timeline})
        return
    origin = int(timeline["ts"][0])
    rows = pl.DataFrame(
        {"category": [k for k in peak if k not in ("ts", "total")] + ["total"]}
    ).with_columns(
        at_peak=pl.col("category").replace_strict(peak, return_dtype=pl.Int64),
        at_end=pl.col("category").replace_strict(timeline.row(-1, named=True), return_dtype=pl.Int64),
    ).sort("at_peak", descending=True)
    emit(
        _bytes_columns(rows, ["at_peak", "at_end"]),
        title=f"torch memory timeline: peak {units.memory(peak['total'])} at "
        f"{(peak['ts'] - origin) / 1e6:,.3f} ms, by tensor category: {trace}",
    )


def snapshot_report(trace: str, json_: bool) -> None:
    """A CUDA allocator snapshot: the peak per device over its recorded history."""
    actions, blocks = snapshot_tables(read_snapshot(trace))
    peaks = snapshot_peaks(actions, blocks)
    if json_:
        emit_json({"trace": trace, "format": "cuda_memory_snapshot", "actions": actions.height, "peaks": peaks})
        return
    if peaks.height == 0:
        raise TraceError(trace, "the snapshot holds no allocations")
    first = actions["time_us"].min()
    rows = peaks.select(
        device=pl.format("cuda:{}", "device"), at_start="at_start_bytes", peak="peak_bytes", at_end="at_end_bytes",
        peak_at_ms=((pl.col("peak_time_us") - first) / 1000.0).round(3) if first is not None else pl.lit(None),
        allocated_at="peak_frame",
    )  # fmt: skip
    emit(
        _bytes_columns(rows, ["at_start", "peak", "at_end"]),
        title=f"CUDA allocator snapshot: allocated memory over {counted(actions.height, 'allocator action')}: {trace}",
    )
