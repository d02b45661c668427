"""MegEngine's memory-flow picture: time across, address up, one box per allocation.

Each allocation from :func:`kinetolens.analysis.memory.allocations.allocations`
becomes a rectangle spanning its lifetime horizontally and its address range
``[addr, addr + size)`` vertically, coloured by the op that allocated it, with
a ``<title>`` tooltip.  Seeing blocks side by side shows fragmentation,
long-lived activations and what sits under the peak.

Two choices keep the picture readable and its size bounded:

* Address axis compaction.  A device's blocks sit in a few used ranges far
  apart in the address space (allocator segments, different pools); drawn to
  scale they would be thin lines.  Unused stretches between used ranges are
  cut out and marked with dashed break lines labelled with the next range's
  start address.
* Sub-pixel merging.  Boxes smaller than a pixel both ways are merged into one
  1x1 mark per pixel they fall on, and beyond ``max_marks`` boxes only the
  largest are drawn one by one; the picture says how many were merged.

The SVG is written element by element (it is a small format) and escaped
with the standard library, so it needs no template engine.
"""

from __future__ import annotations

import math
import re
from xml.sax.saxutils import escape

import polars as pl

from kinetolens.views import units

#: Colours for the ops that allocated the most bytes (Tableau 10), then grey.
PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)
OTHER_COLOR = "#7f7f7f"
OTHER_KEY = "(other ops)"
BEFORE_KEY = "(allocated before the window)"
NO_OP_KEY = "(no enclosing op)"

MARGIN_LEFT = 120
MARGIN_RIGHT = 260
MARGIN_TOP = 56
MARGIN_BOTTOM = 48

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _text(s: object) -> str:
    """Escaped XML text; control characters (invalid in XML 1.0) dropped."""
    return escape(_CONTROL.sub("", str(s)))


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def _color_keys(boxes: pl.DataFrame, colors: int) -> dict[str, str]:
    """The ``colors`` keys holding the most bytes get palette colours."""
    ranked = (
        boxes.group_by("key")
        .agg(pl.col("size").sum())
        .filter(~pl.col("key").is_in([BEFORE_KEY]))
        .sort("size", "key", descending=[True, False])
        .head(colors)["key"]
        .to_list()
    )
    mapping = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(ranked)}
    mapping[BEFORE_KEY] = "#c7c7c7"
    return mapping


def _compact_addresses(boxes: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, float]:
    """Adds ``y0``/``y1`` (compacted byte offsets) and returns the used
    ranges (``seg_start``, ``seg_end``, ``base``) and the axis length."""
    spans = boxes.select("addr", (pl.col("addr") + pl.col("size")).alias("stop")).sort("addr")
    spans = spans.with_columns(reach=pl.col("stop").cum_max())
    spans = spans.with_columns(seg=(pl.col("addr") > pl.col("reach").shift(1)).fill_null(True).cast(pl.Int64).cum_sum())
    segs = spans.group_by("seg").agg(seg_start=pl.col("addr").min(), seg_end=pl.col("stop").max()).sort("seg")
    used = float((segs["seg_end"] - segs["seg_start"]).sum())
    n = segs.height
    gap = min(0.02 * used, 0.25 * used / n) if n > 1 else 0.0
    segs = segs.with_columns(
        base=((pl.col("seg_end") - pl.col("seg_start")).cum_sum().shift(1).fill_null(0).cast(pl.Float64))
        + gap * (pl.col("seg") - 1).cast(pl.Float64)
    )
    total = used + gap * (n - 1)
    boxes = (
        boxes.sort("addr")
        .join_asof(segs.select("seg_start", "base"), left_on="addr", right_on="seg_start", strategy="backward")
        .with_columns(y0=pl.col("base") + (pl.col("addr") - pl.col("seg_start")).cast(pl.Float64))
        .with_columns(y1=pl.col("y0") + pl.col("size").cast(pl.Float64))
    )
    return boxes, segs, max(total, 1.0)


def _nice_step(span: float, ticks: int) -> float:
    """A 1, 2 or 5 times a power of ten giving about ``ticks`` ticks."""
    raw = span / max(ticks, 1)
    if raw <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5):
        if raw <= m * magnitude:
            return m * magnitude
    return 10 * magnitude


def render_memory_flow(
    allocs: pl.DataFrame,
    *,
    window: tuple[int, int],
    title: str,
    width: int = 1400,
    height: int = 720,
    max_marks: int = 10_000,
    colors: int = 10,
) -> str:
    """The SVG document for one device's allocation table.

    ``window`` (trace ns) is the profiled span: allocations still alive run to
    its end, blocks allocated before it start at its start.
    """
    t0, t1 = window
    t1 = max(t1, t0 + 1)
    pw = width - MARGIN_LEFT - MARGIN_RIGHT
    ph = height - MARGIN_TOP - MARGIN_BOTTOM
    out: list[str] = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">'
        ),
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{MARGIN_LEFT}" y="20" font-size="15" font-weight="bold">{_text(title)}</text>',
    ]
    boxes = allocs.filter(pl.col("addr").is_not_null() & (pl.col("size") > 0))
    if boxes.height == 0:
        out.append(f'<text x="{MARGIN_LEFT}" y="{MARGIN_TOP + 20}">no allocations with addresses to draw</text>')
        out.append("</svg>")
        return "\n".join(out) + "\n"

    boxes = boxes.with_columns(
        x0=pl.col("alloc_ts").fill_null(t0).clip(t0, t1),
        x1=pl.col("free_ts").fill_null(t1).clip(t0, t1),
        key=pl.when(pl.col("status") == "before_window")
        .then(pl.lit(BEFORE_KEY))
        .otherwise(pl.col("op").fill_null(NO_OP_KEY)),
    )
    palette = _color_keys(boxes, colors)
    boxes, segs, total = _compact_addresses(boxes)
    sx = pw / (t1 - t0)
    sy = ph / total
    boxes = boxes.with_columns(
        px=MARGIN_LEFT + (pl.col("x0") - t0).cast(pl.Float64) * sx,
        pw=(pl.col("x1") - pl.col("x0")).cast(pl.Float64) * sx,
        py=MARGIN_TOP + ph - pl.col("y1") * sy,
        ph=(pl.col("y1") - pl.col("y0")) * sy,
    ).with_columns(area=pl.col("pw").clip(lower_bound=1.0) * pl.col("ph").clip(lower_bound=1.0))

    tiny = (pl.col("pw") < 1.0) & (pl.col("ph") < 1.0)
    drawn = boxes.filter(~tiny).sort("area", descending=True, maintain_order=True)
    merged = boxes.filter(tiny)
    capped = drawn.height > max_marks
    if capped:
        merged = pl.concat([merged, drawn.slice(max_marks)], how="vertical_relaxed")
        drawn = drawn.head(max_marks)
    # Per pixel: the allocations under it, and the key most of them have
    # (ties: the one with more bytes, then the first by name; a mode's own
    # order of ties changes from run to run).
    by_key = (
        merged.with_columns(cx=pl.col("px").floor(), cy=(pl.col("py") + pl.col("ph")).floor())
        .group_by("cx", "cy", "key")
        .agg(n=pl.len(), bytes=pl.col("size").sum())
        .sort(["cx", "cy", "n", "bytes", "key"], descending=[False, False, True, True, False])
    )
    cells = by_key.group_by("cx", "cy", maintain_order=True).agg(
        count=pl.col("n").sum(), size=pl.col("bytes").sum(), key=pl.col("key").first()
    )

    out.append(f'<g id="plot"><rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{pw}" height="{ph}" '
               'fill="#fafafa" stroke="#999999"/>')
    out.append('<g id="allocations">')
    for row in drawn.sort("px", maintain_order=True).iter_rows(named=True):
        color = palette.get(row["key"], OTHER_COLOR)
        alloc = "before the window" if row["alloc_ts"] is None else f"+{_ms(row['alloc_ts'] - t0)}"
        free = "after the window" if row["free_ts"] is None else f"+{_ms(row['free_ts'] - t0)}"
        life = "" if row["lifetime_us"] is None else f" ({row['lifetime_us'] / 1000:,.3f} ms)"
        tip = (
            f"{row['op'] or row['key']}"
            f"{' | ' + row['module'] if row['module'] else ''}"
            f" | {units.memory(row['size'])} at 0x{row['addr']:x}"
            f" | alloc {alloc}, free {free}{life}"
            f"{' | freed by ' + row['free_op'] if row['free_op'] else ''}"
            f" | {row['status']}"
        )
        out.append(
            f'<rect x="{row["px"]:.2f}" y="{row["py"]:.2f}" width="{max(row["pw"], 0.5):.2f}" '
            f'height="{max(row["ph"], 0.5):.2f}" fill="{color}" fill-opacity="0.85" stroke="{color}" '
            f'stroke-width="0.2"><title>{_text(tip)}</title></rect>'
        )
    out.append("</g>")
    if cells.height:
        out.append('<g id="merged">')
        for row in cells.iter_rows(named=True):
            color = palette.get(row["key"], OTHER_COLOR)
            tip = f"{row['count']} allocations under one pixel, {units.memory(row['size'])} in all (mostly {row['key']})"
            out.append(
                f'<rect x="{row["cx"]:.0f}" y="{row["cy"]:.0f}" width="1" height="1" fill="{color}">'
                f"<title>{_text(tip)}</title></rect>"
            )
        out.append("</g>")
    out.append("</g>")

    out.extend(_time_axis(t0, t1, pw, ph))
    out.extend(_address_axis(segs, ph, sy))
    out.extend(_legend(palette, boxes, width))
    note = f"{drawn.height:,} of {boxes.height:,} allocations drawn one by one"
    if merged.height:
        why = f"smaller than a pixel or beyond the first {max_marks:,}" if capped else "smaller than a pixel"
        note += f"; {merged.height:,} {why} merged into {cells.height:,} 1-px marks"
    if segs.height > 1:
        note += f"; {segs.height - 1:,} unused address ranges cut out (dashed lines)"
    out.append(f'<text x="{MARGIN_LEFT}" y="38" fill="#555555">{_text(note)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _time_axis(t0: int, t1: int, pw: int, ph: int) -> list[str]:
    span_ms = (t1 - t0) / 1e6
    step = _nice_step(span_ms, 8)
    y = MARGIN_TOP + ph
    parts = ['<g id="x-axis">']
    k = 0
    while k * step <= span_ms + 1e-9:
        x = MARGIN_LEFT + (k * step) / span_ms * pw
        parts.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 5}" stroke="#333333"/>')
        parts.append(f'<text x="{x:.1f}" y="{y + 18}" text-anchor="middle">{k * step:g}</text>')
        k += 1
    parts.append(
        f'<text x="{MARGIN_LEFT + pw / 2:.1f}" y="{y + 38}" text-anchor="middle">'
        "time since the first memory event (ms)</text>"
    )
    parts.append("</g>")
    return parts


def _address_axis(segs: pl.DataFrame, ph: int, sy: float) -> list[str]:
    """Labels each used range's start address; dashed lines where unused
    ranges were cut out.  At most 16 labels (the largest ranges) to stay legible."""
    bottom = MARGIN_TOP + ph
    parts = ['<g id="y-axis">']
    labelled = set(
        segs.with_columns(length=pl.col("seg_end") - pl.col("seg_start"))
        .sort("length", descending=True)
        .head(16)["seg"]
        .to_list()
    )
    breaks_drawn = 0
    for row in segs.iter_rows(named=True):
        y = bottom - row["base"] * sy
        if row["seg"] > 1 and breaks_drawn < 500:
            parts.append(
                f'<line x1="{MARGIN_LEFT}" y1="{y:.2f}" x2="{MARGIN_LEFT + 4}" y2="{y:.2f}" '
                'stroke="#999999" stroke-dasharray="2,2"/>'
            )
            breaks_drawn += 1
        if row["seg"] in labelled:
            parts.append(
                f'<text x="{MARGIN_LEFT - 4}" y="{y:.2f}" text-anchor="end" font-family="monospace" '
                f'font-size="9">0x{row["seg_start"]:x}</text>'
            )
    parts.append(
        f'<text transform="translate(14,{MARGIN_TOP + ph / 2:.1f}) rotate(-90)" text-anchor="middle">'
        "address (unused ranges cut out)</text>"
    )
    parts.append("</g>")
    return parts


def _legend(palette: dict[str, str], boxes: pl.DataFrame, width: int) -> list[str]:
    sizes = dict(boxes.group_by("key").agg(pl.col("size").sum()).iter_rows())
    x = width - MARGIN_RIGHT + 16
    parts = ['<g id="legend">', f'<text x="{x}" y="{MARGIN_TOP}" font-weight="bold">allocated by (bytes)</text>']
    entries = [(k, c) for k, c in palette.items() if k in sizes]
    others = sum(v for k, v in sizes.items() if k not in palette)
    if others:
        entries.append((OTHER_KEY, OTHER_COLOR))
    for i, (key, color) in enumerate(entries):
        y = MARGIN_TOP + 16 + i * 18
        total = others if key == OTHER_KEY else sizes[key]
        label = units.middle(key, 30)
        parts.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{color}"/>')
        parts.append(
            f'<text x="{x + 18}" y="{y}">{_text(label)} ({units.memory(total)})<title>{_text(key)}</title></text>'
        )
    parts.append("</g>")
    return parts
