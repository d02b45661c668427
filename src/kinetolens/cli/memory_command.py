"""``kinetolens memory``: the allocator's peak per device, the ops that
allocate, leaks, and the memory-flow picture (``--svg``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from kinetolens.cli.checks import ROWS
from kinetolens.cli.load_options import TraceLoading, trace_load_options
from kinetolens.errors import TraceError

if TYPE_CHECKING:
    from kinetolens.runs.windowed_read import WindowedMemory


@click.command("memory")
@click.argument("trace", type=str)
@click.option("--svg", "svg_path", type=click.Path(dir_okay=False), default=None,
              help="Write the memory-flow picture (time x address) to this SVG file.")
@click.option("--json", "json_", is_flag=True, help="All tables as JSON (see docs/memory.md).")
@click.option("--device", default=None, help="Only this device: index (1, -1 = CPU) or label (GPU1, CPU).")
@click.option("-t", "--top", type=ROWS, default=10, show_default=True, help="Rows of the op and leak tables.")
@click.option(
    "--windows/--whole", "windows", default=None,
    help="Read the trace a step window at a time (memory bounded by a step and its allocator events), or whole; "
    "default: a step window at a time from 1.5 GB of JSON.",
)
@trace_load_options()
def memory_command(
    trace: str, svg_path: str | None, json_: bool, device: str | None, top: int, loading: TraceLoading,
    windows: bool | None = None,
) -> None:
    """Memory per device: peak with its op and module, top allocating ops, leaks.

    TRACE may also be torch's raw memory timeline
    (export_memory_timeline("x.raw.json.gz")): then the peak by tensor
    category is shown; or a CUDA allocator snapshot (.pickle, written by
    kinetolens.profile(memory_snapshot=True) or
    torch.cuda.memory._dump_snapshot): then each device's peak over the
    recorded history and the Python line of the allocation that reached it.
    """
    # here, not at the top: the command's --help needs neither polars nor rich
    import polars as pl

    from kinetolens.analysis.memory.allocations import allocations, leaks, pairable
    from kinetolens.analysis.memory.samples import SAMPLE_SCHEMA, memory_samples, sample_summary
    from kinetolens.analysis.memory.usage import (
        how_to_record_memory,
        memory_curve,
        memory_events,
        memory_peaks,
        op_memory_stats,
        resolve_device,
    )
    from kinetolens.analysis.trace_kind import trace_kind
    from kinetolens.cli.memory_output import (
        print_sampled,
        print_summary,
        samples_only_report,
        snapshot_report,
        timeline_report,
        write_svg,
    )
    from kinetolens.cli.render import emit_json
    from kinetolens.ingest.memory_timeline import is_memory_timeline

    if trace.lower().endswith(".pickle"):
        snapshot_report(trace, json_)
        return
    if is_memory_timeline(trace):
        timeline_report(trace, json_)
        if svg_path is not None:  # after the report: --svg never hides what can be shown
            raise TraceError(trace, f"a raw memory timeline has no addresses, so there is no memory-flow picture ({svg_path} not written)")
        return
    read = loading.in_windows(trace, windows, _memory_in_windows)
    if read is not None:
        events, op_stats, samples = read.events, read.op_stats, pl.DataFrame(schema=SAMPLE_SCHEMA)
        fmt, pytorch, read_notes = read.format, read.pytorch, [read.read]
    else:
        loaded = loading.load(trace)
        events, op_stats, samples = None, None, memory_samples(loaded)
        fmt, pytorch, read_notes = loaded.format, None, []
        if loaded.memory.height:
            events = memory_events(loaded)
            op_stats = op_memory_stats(events, loaded.ops)
    sampled = sample_summary(samples)
    if events is None or events.height == 0:
        if samples.height == 0:
            if pytorch is None:  # read whole: the program's kind is worked out only to word this error
                pytorch = trace_kind(loaded).pytorch
            raise TraceError(
                trace,
                "has no [memory] events" + (" to draw" if svg_path is not None else "")
                + "; " + how_to_record_memory(fmt, pytorch),
            )
        samples_only_report(trace, samples, sampled, json_)
        if svg_path is not None:
            raise TraceError(trace, f"has no [memory] events (only memory samples), so there is no memory-flow picture ({svg_path} not written)")
        return
    assert op_stats is not None
    if device is not None:
        try:
            label = resolve_device(events, device)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--device") from None
        events = events.filter(pl.col("device") == label)
    origin = int(events["ts"].min())  # type: ignore[arg-type]
    peaks = memory_peaks(events)
    stats = op_stats if device is None else op_stats.filter(pl.col("device") == label)
    allocs = allocations(events)
    leaked = leaks(allocs)

    no_picture = None
    try:
        wrote = write_svg(trace, svg_path, events, peaks, allocs) if svg_path is not None else None
    except TraceError as exc:  # said after the tables, which do not need the picture
        wrote, no_picture = None, exc

    if json_:
        emit_json({
            "trace": trace,
            "origin_ns": origin,
            "pairable": pairable(events),
            "devices": peaks,
            "op_stats": stats,
            "leaks": leaked,
            "allocations": allocs,
            "curve": memory_curve(events),
            "sampled": sampled,
            "samples": samples,
        })
    else:
        print_summary(trace, events, peaks, stats, allocs, leaked, origin, top)
        print_sampled(sampled, origin)
        for note in read_notes:
            click.echo(note)
    if wrote:
        click.echo(f"wrote {svg_path} ({wrote})", err=True)
    if no_picture is not None:
        raise no_picture


def _memory_in_windows(path: Path, notes: list[str]) -> WindowedMemory | None:
    from kinetolens.runs.windowed_read import memory_in_windows  # polars' readers of parts: only for a large trace

    return memory_in_windows(path, notes=notes)
