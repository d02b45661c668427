"""The report's tables as frames, and those frames as HTML or markdown tables.

Shared by the HTML and markdown reports and by the critical-path sections,
so each reads the same cells.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import polars as pl
from markupsafe import Markup

from kinetolens.analysis.gputime.overview import CATEGORIES, OTHER
from kinetolens.analysis.memory.basis import ALLOCATOR, BASIS_NOTES
from kinetolens.analysis.ranks.stragglers import CAUSES
from kinetolens.views import empty_reasons, units
from kinetolens.views.device_words import unlisted_devices_note
from kinetolens.views.inference_words import inference_rows

if TYPE_CHECKING:
    from kinetolens.views.report_data import ReportData


#: Rows of each ranked table a report shows.
TOP_ROWS = 15
#: How to read the source lines table (both report formats).
SOURCES_NOTE = (
    "file:line is the line of user code that made the call leading to the op; "
    "in func (file:line) means only the enclosing user function is known, entered at that line."
)



#: Text cells longer than this are cut in the middle (keeping a module path's root and leaf).
CELL_CHARS = 120
def cell_texts(
    frame: pl.DataFrame, shown: pl.DataFrame, limit: int | None = CELL_CHARS
) -> tuple[list[str], list[list[str]]]:
    """Headers and cell text of ``shown`` (the first rows of ``frame``), formatted as the
    CLI and dashboard format them (:func:`units.display`): 1.95 GiB, 91.5%, one time unit
    per column (its header names it); text cut in the middle beyond ``limit`` characters."""
    columns, rows = units.display(frame, shown)
    heads = [c["label"] for c in columns]  # words with their unit, never the column's identifier
    if limit is not None:
        rows = [[units.middle(t, limit) if c["kind"] == "text" else t for c, t in zip(columns, r)] for r in rows]
    return heads, rows


def frame_html(
    frame: pl.DataFrame, columns: list[str] | None = None, rows: int | None = TOP_ROWS, cell_chars: int | None = CELL_CHARS
) -> Markup:
    """An escaped HTML table of the first ``rows`` rows of ``frame`` (``None``: all)."""
    cols = [c for c in (columns or frame.columns) if c in frame.columns]
    shown = frame.select(cols) if rows is None else frame.select(cols).head(rows)
    heads, texts = cell_texts(frame.select(cols), shown, cell_chars)
    # a column aligns as its type says (numbers right), its header and its empty cells with it
    kinds = ["num" if shown.schema[c].is_numeric() else "name" for c in cols]
    head = "".join(f'<th class="{k}">{html.escape(h)}</th>' for k, h in zip(kinds, heads))
    body = [
        "<tr>" + "".join(f'<td class="{k}">{html.escape(t)}</td>' for k, t in zip(kinds, row)) + "</tr>" for row in texts
    ]
    more = ""
    if rows is not None and frame.height > rows:
        more = f'<p class="kl-muted">{rows} of {frame.height:,} rows shown.</p>'
    return Markup(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}")


def _pct(v: float | None) -> str | None:
    return None if v is None else units.percent(v)


def overview_frame(data: ReportData) -> pl.DataFrame:
    """``what, value`` rows: the summary's headline numbers as text."""
    s = data.summary
    steps = s.steps
    rows: list[tuple[str, str | None]] = [("trace", data.trace.path)]
    phases = inference_rows(s.inference)  # an inference trace: its iterations instead of steps
    if not s.inference.iterations and not steps.count:
        rows.append(("steps profiled", empty_reasons.NO_STEPS))
    elif not s.inference.iterations:
        rows += [
            ("steps profiled", f"{steps.count} ({', '.join(map(str, steps.ids[:10]))}{' ...' if steps.count > 10 else ''})"),
            ("mean step time", None if steps.mean_us is None else f"{steps.mean_us / 1000:.3f} ms"),
            ("step cut short", steps.incomplete_note),
        ]
    rows += phases
    rows += [
        ("trace span", f"{s.span_us / 1000:.3f} ms"),
        ("rank / world size", f"{s.rank} / {s.world_size}" if s.rank is not None else None),
        ("ops ranked by", units.basis_words(data.basis)),
    ]
    ran = unlisted_devices_note([d.id for d in s.devices], s.devices_used)
    for d in s.devices:
        rows.append((f"GPU {d.id}", f"{d.name} (cc {d.compute_capability}, {d.sms} SMs)" + (f"; {ran}" if ran else "")))
    for g in s.gpu:
        dev = g.device
        rows.append((f"GPU {dev} utilization", _pct(g.utilization)))
        rows.append((f"GPU {dev} SM efficiency", _pct(g.sm_efficiency)))
        rows.append((f"GPU {dev} Tensor Core share of kernel time", _pct(g.tensor_core_share)))
        peak = g.peak_allocated_bytes
        counts = "" if g.peak_basis in (None, ALLOCATOR) else f" ({BASIS_NOTES[g.peak_basis]})"
        start = g.live_at_start_bytes
        counts += "" if start is None else f" ({units.memory(start)} alive when profiling started)"
        rows.append((f"GPU {dev} peak allocated", None if peak is None else f"{units.memory(peak)}{counts}"))
    a = s.attribution
    if a.kernel_time_us and not a.possible:
        rows.append(("kernel time attributed to an op", empty_reasons.NO_ATTRIBUTION))
    elif a.kernel_time_us:
        rows.append(("kernel time attributed to an op / module / source line",
                     " / ".join(_pct(share) or "-" for share in (a.op, a.module, a.source))))  # fmt: skip
    rows.append(("kernels whose launch was not recorded", s.unrecorded_launches.note))
    rows.append(("read", s.read_in_windows.removeprefix("read ") if s.read_in_windows else None))
    rows.extend(("warning", w) for w in data.warning_lines())
    return pl.DataFrame(
        [r for r in rows if r[1] is not None], schema={"what": pl.String, "value": pl.String}, orient="row"
    )


def breakdown_frame(data: ReportData) -> pl.DataFrame:
    """Mean time and share of step time per category (the overview's rules)."""
    avg = data.summary.steps.average_us
    total = avg.total if avg is not None else 0.0
    cats = [c for c in (*CATEGORIES, OTHER) if avg is not None and avg.part(c)]
    return pl.DataFrame(
        {
            "category": cats,
            "mean_per_step_us": [avg.part(c) for c in cats] if avg is not None else [],
            "pct_of_step": [100.0 * avg.part(c) / total if total else None for c in cats] if avg is not None else [],
        },
        schema={"category": pl.String, "mean_per_step_us": pl.Float64, "pct_of_step": pl.Float64},
    )


def memory_frame(data: ReportData) -> pl.DataFrame:
    """Peak per device with what it counts (the memory view's numbers, :func:`memory.peak_memory`)."""
    return data.memory_peaks.select(
        "device",
        peak_allocated_bytes="peak_allocated",
        alive_at_start_bytes="live_at_start",
        peak_op="peak_op",
        counts=pl.col("basis").replace_strict(BASIS_NOTES, default=None, return_dtype=pl.String),
    )


CROSS_RANK_TABLES = {
    "stragglers": ("Arrival at collectives (late: ms after the earliest rank, per step)",
                   ["rank", "straggler", "late_ms", "last_share_pct", "caused_share_pct", "cost_ms_per_step", "differs_most", "excess_ms"]),
    "ranks": ("Per rank (ms per step)", None),
    "steps": ("Step time across ranks (ms)", None),
    "dimensions": ("Parallel dimensions (per rank: ms over the trace; exposed: ms per step not hidden by compute)",
                   None),
    "collectives": ("Collectives (per rank: ms over the trace, bandwidth in GB/s as nccl-tests)", None),
    "skew": ("Transfer vs arrival skew (us per call, aligned clocks)", None),
    "clocks": ("Clock offsets from the reference rank (from matched collective ends)", None),
}  # fmt: skip


def cross_rank_frames(data: ReportData) -> dict[str, tuple[str, pl.DataFrame]]:
    """The non-empty cross-rank tables with their headings and columns, the
    cause category named as ``kinetolens dist`` names it (both formats)."""
    assert data.cross_rank is not None
    out = {}
    for name, (heading, cols) in CROSS_RANK_TABLES.items():
        frame = getattr(data.cross_rank, name)
        if frame.height:
            if "differs_most" in frame.columns:
                frame = frame.with_columns(pl.col("differs_most").replace(CAUSES))
            frame = units.shares_as_percent(frame)
            out[name] = (heading, frame.select([c for c in (cols or frame.columns) if c in frame.columns]))
    return out



CHART_PX = 420
MIN_CHART_PX = 360



#: Rows per ranked table in markdown.
MD_ROWS = 10
#: Text cells are cut in the middle beyond this many characters.
MD_CELL_CHARS = 80


def _cell(text: str) -> str:
    # A pipe would end the cell; a newline would end the row.
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def frame_md(
    frame: pl.DataFrame, columns: list[str] | None = None, rows: int | None = MD_ROWS, cell_chars: int | None = MD_CELL_CHARS
) -> str:
    """A markdown table of the first ``rows`` rows (numbers right-aligned);
    ``cell_chars=None`` keeps whole sentences whole."""
    cols = [c for c in (columns or frame.columns) if c in frame.columns]
    if not cols or frame.height == 0:
        return "_(none)_\n"
    shown = frame.select(cols) if rows is None else frame.select(cols).head(rows)
    align = ["---:" if frame.schema[c].is_numeric() else ":---" for c in cols]
    heads, texts = cell_texts(frame.select(cols), shown, cell_chars)
    lines = ["| " + " | ".join(_cell(h) for h in heads) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_cell(t) for t in row) + " |" for row in texts]
    if rows is not None and frame.height > rows:
        lines.append(f"\n_{rows} of {frame.height:,} rows._")
    return "\n".join(lines) + "\n"


