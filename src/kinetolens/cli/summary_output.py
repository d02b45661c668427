"""The terminal view of ``kinetolens summary``: what a trace is, where its
steps' time went, how well its kernels are attributed, what to change first.

Every figure is a field of :class:`kinetolens.analysis.summary_types.Summary`
(kept with the trace's cache entry, so a second summary reads it back);
this module only lays them out.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kinetolens.analysis.finding import Finding
from kinetolens.analysis.gputime.step_times import StepTimes
from kinetolens.analysis.memory.basis import ALLOCATOR, BASIS_NOTES, WINDOW_SUM
from kinetolens.analysis.paths.sampling import sample_in_words
from kinetolens.analysis.summary_types import Device, GpuUse, PeakMemory, RunDevice, Steps, Summary
from kinetolens.cli.load_options import TraceLoading
from kinetolens.cli.render import console as render_console
from kinetolens.cli.render import print_captioned, print_pairs
from kinetolens.model.vocabulary import CATEGORY_HEADERS
from kinetolens.views import empty_reasons, units
from kinetolens.views.device_words import unlisted_devices_note
from kinetolens.views.inference_words import inference_rows

if TYPE_CHECKING:
    from kinetolens.model.trace import Trace


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def summarized(trace: Trace) -> Summary:
    """The summary of a loaded trace.  The analyses are imported only when
    one is computed: a summary read back from the cache needs none of them."""
    from kinetolens.analysis.summary import summarize

    return summarize(trace)


def summary_of(trace: str, loading: TraceLoading, windows: bool | None = None) -> Summary:
    """The summary of one trace file: from the cache entry where it holds one,
    else computed (JSON-ready, and costly: the recommendations simulate their
    savings) and kept there.  ``windows``: read the file a step window at a
    time (True), whole (False), or whole unless it is too large to hold (None;
    :mod:`kinetolens.runs.windowed_read`)."""
    name = {None: "summary", True: "summary_windows", False: "summary_whole"}[windows]
    from_file = None if windows is False else partial(loading.in_windows, windows=windows, read=_summary_in_windows)
    return loading.derived(trace, name, summarized, Summary, from_file=from_file)


def _summary_in_windows(path: Path, notes: list[str]) -> Summary | None:
    from kinetolens.runs.windowed_read import summary_in_windows  # polars: only for a large trace

    return summary_in_windows(path, notes=notes)


def print_summary(trace: str, loading: TraceLoading, width: int | None, windows: bool | None = None) -> None:
    """One trace's summary in the terminal."""
    info = summary_of(trace, loading, windows)
    console = render_console(width)
    table = _Pairs()
    dev = _devices_text(info.devices) or _run_device(info.device)
    if note := unlisted_devices_note([d.id for d in info.devices], info.devices_used):
        dev = f"{dev}; {note}"
    table.add_row("format", info.format)
    gpu = info.kind.gpu
    if not gpu:
        dev = f"{'CPU only' if dev == '-' else dev} (no GPU: GPU rows left out)"
    table.add_row("devices", dev)
    table.add_row("rank / world size", f"{info.rank if info.rank is not None else '-'} / {info.world_size or '-'}")
    steps = info.steps
    phases = bool(info.inference.iterations)  # an inference trace shows its phases instead of steps
    mean = f", mean {steps.mean_us / 1000:.3f} ms" if steps.mean_us else ""
    cut = f" ({len(steps.incomplete)} cut short, not in the mean)" if steps.incomplete else ""
    if not phases and steps.count:
        table.add_row("steps", f"{steps.count} {list(steps.ids[:8])}{mean}{cut}")
    elif not phases:
        table.add_row("steps", empty_reasons.NO_STEPS)
    for what, value in inference_rows(info.inference):
        table.add_row(what, table.note(value) if what == "inference" else value)
    # kinds with no event are left out (all are in --json): the row stays within its two lines
    ev = {k: v for k, v in vars(info.events).items() if (gpu or k not in GPU_EVENTS) and (v or k == "ops")}
    table.add_row("events", ", ".join(f"{k} {v:,}" for k, v in ev.items()))
    if gpu:
        _add_attribution(table, info)
    for m in info.memory:
        table.add_row(f"peak memory {m.device}", _peak_text(m, table.note))
    for w in info.warnings:
        table.add_row("warning", f"{w.kind}: {w.detail} ({w.count}x)")
    if info.read_in_windows:
        table.add_row("read", table.note(info.read_in_windows.removeprefix("read ")))
    table.print(console, f"kinetolens summary: {trace}")
    if phases:
        from kinetolens.cli.phases_output import print_inference  # an inference trace's tables only

        print_inference(console, info.inference)
    else:
        _print_breakdown(console, steps, gpu)
    _print_gpus(console, info.gpu, "GPUs during the steps" if steps.count else "GPUs over the trace")
    _print_recommendations(console, info.recommendations)
    if info.recommendations_withheld:
        console.print(f"No recommendations: {info.recommendations_withheld}.", markup=False, highlight=False)
    if info.recommendations_left_out:
        console.print(f"Not advised: {info.recommendations_left_out}.", markup=False, highlight=False)


#: Event counts that only a GPU program has (left out of a CPU-only summary).
GPU_EVENTS = ("runtime", "kernels", "memcpy", "memset")


def _add_attribution(table: _Pairs, info: Summary) -> None:
    """Kernel time and how much of it has an op, module, source line, forward op."""
    a = info.attribution
    table.add_row("kernel time", f"{a.kernel_time_us / 1000:.3f} ms (every kernel in the file, summed)")
    if not a.possible:
        # a GPU-only capture: "0.0% with an op" would read as an attribution that failed
        table.add_row("  attribution", empty_reasons.NO_ATTRIBUTION)
        return
    table.add_row("  with an op", _pct(a.op))
    table.add_row("  with a module", _pct(a.module))
    table.add_row("  with a source line", _pct(a.source))
    table.add_row("    at its call line", _pct(a.source_call_line))
    unrecorded = info.unrecorded_launches
    if unrecorded.note:
        table.add_row("  launch not recorded", table.note(unrecorded.note))
    if a.graph_replay_time_us:
        table.add_row("graph-replayed kernel time", f"{a.graph_replay_time_us / 1000:.3f} ms")
        table.add_row("  with its capture op", _pct(a.graph_replay_with_capture_op))
        table.add_row("  with a module", _pct(a.graph_replay_with_module))
    if info.kind.pytorch and not info.kind.inference:  # inference runs no backward
        table.add_row("backward kernel time", f"{a.backward_time_us / 1000:.3f} ms")
        table.add_row("  with its forward op", _pct(a.backward_with_forward_op))


def _run_device(device: RunDevice | None) -> str:
    """``CPU: AMD EPYC 7B13`` from the capture's run metadata, where the trace names no GPU."""
    if device is None or not device.name:
        return "-"
    return f"{str(device.type or '').upper()}: {device.name}".lstrip(": ")


class _Pairs:
    """The summary's ``what: value`` rows; long explanations go under the
    table as numbered notes, so each value stays within two lines."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str]] = []
        self.notes: list[str] = []

    def add_row(self, what: str, value: str) -> None:
        self.rows.append((what, value))

    def note(self, text: str) -> str:
        """``text`` as a note; returns its marker, or ``text`` itself when short."""
        head, sep, rest = text.partition(": ")
        if len(text) <= NOTE_CHARS:
            return text
        body = rest if sep else text
        if body not in self.notes:  # the same explanation (CPU and GPU peaks) is one note
            self.notes.append(body)
        return f"{head if sep else ''} [{self.notes.index(body) + 1}]".strip()

    def print(self, console: Console, title: str) -> None:
        print_pairs(self.rows, title=title, out=console)
        for i, text in enumerate(self.notes, 1):
            console.print(Text(f"[{i}] {text}"))


#: Longest explanation kept in a summary value; longer ones become notes under the table.
NOTE_CHARS = 60


def _peak_text(m: PeakMemory, note: Callable[[str], str] = str) -> str:
    """The peak with what it covers: everything alive (and what was alive at the start), or the window only."""
    peak = units.memory(m.peak_allocated)
    if m.basis == ALLOCATOR:
        start = m.live_at_start
        return peak if start is None else f"{peak} ({units.memory(start)} alive when profiling started)"
    return f"{peak}, {note(m.note)}"


#: Recommendations shown in the terminal (all of them are in --json).
TOP_RECOMMENDATIONS = 3


def _print_recommendations(console: Console, findings: Sequence[Finding]) -> None:
    if not findings:
        return
    # Wrapped paragraphs, never cut: the evidence (a kernel's name) is read whole.
    per = findings[0].per  # an inference trace's: per engine iteration
    console.print(Text(f"What to change first (estimated saving per {per})", style="bold"))
    width = min(console.width, 100_000)
    sampled = next((f.simulated_on for f in findings[:TOP_RECOMMENDATIONS] if f.simulated_on), None)
    if sampled:
        console.print(Text(textwrap.fill(f"savings simulated on {sample_in_words(sampled)}", width)))
    for i, f in enumerate(findings[:TOP_RECOMMENDATIONS], 1):
        predicted = f" (step -> {f.predicted_step_ms:.2f} ms)" if f.predicted_step_ms is not None else ""
        for text in (f"{i}. {units.saving_ms(f.saving_ms)}{predicted}  {f.title}: {f.evidence}", f"change: {f.change}"):
            lead = "" if text[0].isdigit() else "   "
            console.print(Text(textwrap.fill(text, width, initial_indent=lead, subsequent_indent="   ")))


#: Step rows shown in the terminal; the average row covers all of them.
MAX_STEP_ROWS = 12


#: Breakdown categories only GPU work fills (always 0 without a GPU).
GPU_CATEGORIES = ("kernel", "memcpy", "memset", "runtime")


def _share(part: float, whole: float) -> str:
    return f"{part / whole * 100:.1f}" if whole else "-"


def _print_breakdown(console: Console, steps: Steps, gpu: bool = True) -> None:
    """Each step's wall time (ms) and the share (%) of each category in it
    (without the GPU categories, always 0, for a program without a GPU)."""
    rows, avg = steps.breakdown_us, steps.average_us
    if not rows or avg is None:
        return
    headers = {c: h for c, h in CATEGORY_HEADERS.items() if gpu or c not in GPU_CATEGORIES}
    table = Table(
        title="Step time breakdown (% of each step)", header_style="bold", box=box.SIMPLE_HEAD, collapse_padding=True, caption_justify="left"
    )
    table.add_column("step")
    table.add_column("ms", justify="right")
    for header in headers.values():
        table.add_column(header, justify="right")

    def add(label: str, row: StepTimes, style: str | None = None) -> None:
        cells = (_share(row.part(c), row.total) for c in headers)
        table.add_row(label, f"{row.total / 1000:,.1f}", *cells, style=style)

    shown = list(rows[:MAX_STEP_ROWS])
    cut = [r for r in rows if not r.complete]
    if cut and cut[-1] not in shown:
        shown = [*rows[: MAX_STEP_ROWS - 1], cut[-1]]
    for row in shown:
        label = str(row.step) if row.step is not None else "all"
        add(label if row.complete else f"{label}*", row, style=None if row.complete else "dim")
    if len(rows) > len(shown):
        table.add_row(f"+{len(rows) - len(shown)}", *([""] * (len(headers) + 1)))
    if len(rows) > 1:
        add("mean", avg, style="bold")
    table.caption = "mean ms: " + ", ".join(f"{h} {avg.part(c) / 1000:,.3f}" for c, h in headers.items())
    if steps.incomplete_note:
        table.caption += f"\n* {steps.incomplete_note}"
    if steps.damaged:
        table.caption += "\n! the file is damaged (see below): these steps lack the events it lost"
    print_captioned(console, table)


def _devices_text(devices: Sequence[Device]) -> str:
    """``AMD Instinct MI300X (id 0)``; GPUs of one model listed once with their ids (``8 x H100 (ids 0-7)``)."""
    by_name: dict[str, list[int | None]] = {}
    for d in devices:
        if d.name:
            by_name.setdefault(d.name, []).append(d.id)
    parts = []
    for name, ids in by_name.items():
        if len(ids) == 1:
            parts.append(f"{name} (id {ids[0]})")
        else:
            run = ids == list(range(ids[0], ids[0] + len(ids))) if all(isinstance(i, int) for i in ids) else False
            shown = f"{ids[0]}-{ids[-1]}" if run else ", ".join(map(str, ids))
            parts.append(f"{len(ids)} x {name} (ids {shown})")
    return ", ".join(parts)


def _print_gpus(console: Console, gpus: Sequence[GpuUse], title: str) -> None:
    """``title`` names the span the figures cover (:func:`~kinetolens.analysis.hardware.gpu_metrics.metrics_span`)."""
    if not gpus:
        return
    table = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, collapse_padding=True, caption_justify="left")
    for header in ("GPU", "name", "util", "SM eff", "occup.", "TC", "peak mem"):
        table.add_column(header, justify="left" if header == "name" else "right")
    for g in gpus:
        peak = g.peak_allocated_bytes
        table.add_row(
            str(g.device),
            g.name or "-",
            _pct(g.utilization),
            _pct(g.sm_efficiency),
            _pct(g.occupancy),
            _pct(g.tensor_core_share),
            "-" if peak is None else units.memory(peak) + ("" if g.peak_basis == ALLOCATOR else "*"),
        )
    table.caption = "util: time a kernel ran; SM eff, occup.: estimates; TC: kernel time on Tensor Cores"
    if any(g.peak_allocated_bytes is not None and g.peak_basis != ALLOCATOR for g in gpus):
        table.caption += f"\n* {BASIS_NOTES[WINDOW_SUM]}"
    print_captioned(console, table)
