"""What each dashboard view shows: a list of blocks (cards, figures, tables, text) for the front end.

A view builder returns JSON-ready blocks; the front end draws them in order
without knowing what they mean.  Figures travel as plotly JSON
(``fig.to_json()``), tables as a *source* name (:mod:`.sources`) that the
browser then pages through ``/api/table``, so no view ever sends a whole
table.  Every number comes from an analysis function.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from kinetolens.analysis.hardware.kernels import tensor_core_time
from kinetolens.analysis.trace_kind import trace_kind
from kinetolens.analysis.memory.usage import how_to_record_memory, memory_curve, memory_events, memory_peaks
from kinetolens.analysis.memory.allocations import pairable
from kinetolens.analysis.workload.ops import op_stats, rank_basis, time_basis
from kinetolens.analysis.advice.recommendations import damaged_inputs, recommendations_frame
from kinetolens.analysis.gputime.overview import step_breakdown, step_windows
from kinetolens.analysis.hardware.roofline import op_roofline
from kinetolens.analysis.summary import attribution, steps_block
from kinetolens.views import empty_reasons, figures, units
from kinetolens.views.dashboard import extra_figures, phases_page
from kinetolens.views.dashboard.blocks import Block, figure, table, text, unavailable
from kinetolens.views.plot_spec import Figure, update_layout, update_traces
from kinetolens.views.dashboard.sources import (
    KERNEL_GROUPS,
    MODULE_DEPTHS,
    OP_GROUPS,
    BadParameter,
    Ctx,
    kernel_rows,
    memory_window,
    spec_of,
)

def _nsys(ctx: Ctx) -> bool:
    return str(ctx.trace.format).startswith("nsys")


def _rank(t: Any) -> str:
    if t.rank is None:
        return "-"
    return f"{t.rank} of {t.world_size}" if t.world_size else str(t.rank)


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000.0:,.3f} ms"


def _pct(x: float | None) -> str:
    return units.percent(x)


def overview(ctx: Ctx) -> list[Block]:
    t = ctx.trace
    steps = ctx.memo("steps_block", lambda: steps_block(t))
    attr = ctx.memo("attribution", lambda: attribution(t))
    inference = phases_page.inference(ctx)  # an inference trace: its iterations and phases instead of steps
    devices = ", ".join(sorted({str(d.get("name")) for d in t.devices if d.get("name")})) or "none recorded"
    cards = [
        ["format", t.format],
        ["GPUs", devices],
        ["rank", _rank(t)],
        *(phases_page.cards(inference) if inference else [
            *([["steps", str(steps.count)], ["mean step", _ms(steps.mean_us)]] if steps.count
              else [["steps", empty_reasons.NO_STEPS]]),
            *([["step cut short", steps.incomplete_note]] if steps.incomplete_note else []),
        ]),
    ]  # fmt: skip
    gpu = t.kernels.height > 0
    if gpu:
        cards += [
            ["kernel time", _ms(attr.kernel_time_us)],
            *([["kernels attributed to an op", _pct(attr.op)], ["to a module", _pct(attr.module)]] if attr.possible
              else [["kernel attribution", empty_reasons.NO_ATTRIBUTION]]),
        ]  # fmt: skip
    head = [
        {"type": "cards", "items": cards},
        table("gpus", "Per GPU: utilization, SM efficiency, occupancy, Tensor Core share, peak memory") if gpu
        else text("No per-GPU table: this trace records no GPU kernels (a CPU-only capture)."),
    ]
    if inference:
        return [*head, *phases_page.blocks(ctx, inference), findings(ctx)]
    breakdown = step_breakdown(t)  # the trace's session keeps it
    return [
        *head,
        figure(figures.step_breakdown_figure(breakdown)) if breakdown.height
        else text("No step breakdown: the trace has no events to split into steps.", "warn"),
        table("execution_summary", "Execution summary: the average step", sort=None),
        findings(ctx),
    ]


def findings(ctx: Ctx) -> Block:
    """The recommendations as cards: each with its whole evidence, change and estimate (a table cell cuts them)."""
    recs = recommendations_frame(ctx.trace)  # findings kept in the trace's session
    withheld = ctx.memo("damaged_inputs", lambda: damaged_inputs(ctx.trace))
    items = [
        {"title": r["title"], "saving": f"(saves up to {units.saving_ms(r['saving_ms'])} per {r['per']}"
         + (f"; predicted step {units.sig(r['predicted_step_ms'])} ms)" if r.get("predicted_step_ms") is not None else ")"),
         "evidence": r["evidence"], "change": r["change"], "estimate": r["estimate"]}
        for r in recs.sort("saving_ms", descending=True, nulls_last=True).iter_rows(named=True)
    ]  # fmt: skip
    empty = f"No recommendations: {withheld}." if withheld else "No rule fired: nothing obvious to change in this trace."
    per = "iteration" if phases_page.inference(ctx) else "step"  # as the rules count on an inference trace
    return {"type": "findings", "title": f"Recommendations (estimated saving per {per})", "items": items, "empty": empty}


def operators(ctx: Ctx) -> list[Block]:
    if ctx.trace.ops.height == 0:
        why = ("this Nsight export holds no NVTX ranges, which are what become operators" if _nsys(ctx)
               else "it records no operator events")
        return [unavailable("Operators are", why), text("The Kernels and Timeline views show its GPU work.")]
    basis = rank_basis(ctx.trace)  # self time: nested ops would count their children's kernels again
    by_op = op_stats(ctx.trace, by="op", step=ctx.step)
    return [
        table(
            "ops", "Operators (click a row for its kernels and call sites)", sort=basis,
            choices={"group": list(OP_GROUPS)},
            detail=[{"source": "op_kernels", "title": "Kernels of"}, {"source": "op_stacks", "title": "Call sites of"}],
        ),
        {"type": "row", "blocks": [
            figure(_pie_below(figures.top_ops_figure(by_op, value=basis, top=10, kind="pie",
                                                     title=f"Top 10 ops by {_time_label(basis)}"))),
            figure(_pie_below(figures.top_ops_figure(by_op, value="host_self_us", top=10, kind="pie",
                                                     title="Top 10 ops by host self time"))),
        ]},
    ]  # fmt: skip


def _time_label(column: str) -> str:
    """``device_total_us`` -> ``device total time``."""
    return column.removesuffix("_us").replace("_", " ") + " time"


def _pie_below(fig: Figure) -> Figure:
    """A pie in half the page: legend under it and labels inside, so long op names do not squeeze it to a dot."""
    update_traces(fig, "pie", textposition="inside")
    return update_layout(fig, height=520, legend={"orientation": "h", "y": -0.05, "x": 0, "yanchor": "top"},
                         margin={"l": 20, "r": 20, "t": 50, "b": 20})  # fmt: skip


def kernels(ctx: Ctx) -> list[Block]:
    if ctx.trace.kernels.height == 0:
        return [unavailable("Kernels are", "it records no GPU kernels (a CPU-only capture)")]
    rows = kernel_rows(ctx)
    return [
        table("kernels", "Kernels", sort="total_us", choices={"group": list(KERNEL_GROUPS)}),
        tensor_cores(rows),
    ]


def tensor_cores(rows: pl.DataFrame) -> Block:
    """The Tensor Core pie, or one sentence where all kernel time has one verdict (a one-slice pie says nothing)."""
    by = tensor_core_time(rows) if rows.height else rows
    if by.height == 0:
        return text("No Tensor Core breakdown: no kernel time in this step.")
    if by.height == 1:
        verdict, us = str(by["tc"][0]), float(by["us"][0])
        what = {"yes": "runs on Tensor Cores", "no": "runs without Tensor Cores"}.get(
            verdict, "is in kernels whose Tensor Core use is unknown")
        return text(f"Tensor Cores: all GPU kernel time ({units.duration(us)}) {what}.")
    return figure(figures.tensor_core_figure(rows))


def modules(ctx: Ctx) -> list[Block]:
    mods = op_stats(ctx.trace, by="module", step=ctx.step)
    if mods["module"].drop_nulls().len() == 0:
        why = ("Nsight exports carry no nn.Module hierarchy" if _nsys(ctx)
               else "it records no nn.Module hierarchy (profile with with_modules=True or with_stack=True)")
        return [unavailable("Modules are", why)]
    return [
        figure(figures.module_icicle_figure(mods, value=time_basis(ctx.trace))),
        table("modules", f"Module tree: forward and backward {'device' if ctx.trace.kernels.height else 'host (CPU)'} "
              "time, self and total, FLOPs, % of roof "
              "(depth: levels shown; view type: one row per module class)", sort=None,
              choices={"depth": list(MODULE_DEPTHS), "view": ["tree", "type"]}),
    ]


def roofline(ctx: Ctx) -> list[Block]:
    if ctx.trace.kernels.height == 0:
        return [unavailable("The roofline is", "it records no GPU kernels (a CPU-only capture)")]
    spec = spec_of(ctx)
    if spec is None:
        return [text("No roofline: the GPU is not in the registry (or the trace names none).", "warn")]
    ops = ctx.memo("op_roofline", lambda: op_roofline(ctx.trace, spec))
    if ops.filter((pl.col("flops") > 0) & (pl.col("bytes") > 0)).height == 0:
        why = ("no operator has FLOPs and bytes counted from its shapes"
               + (" (an Nsight export records kernels, not the shapes of the ops behind them)" if _nsys(ctx) else ""))
        return [unavailable("The roofline is", why)]
    title = f"Roofline on {spec.name} ({spec.dram_gbps:,.0f} GB/s)"
    return [
        figure(figures.roofline_figure(ops, spec, title)),
        table("roofline", "Time lost to the roofline", sort="lost_us", choices={"group": ["op", "module"]}),
    ]


def memory(ctx: Ctx) -> list[Block]:
    if ctx.trace.memory.height == 0:
        return [unavailable("Memory is", f"it has no memory records: {how_to_record_memory(ctx.trace.format, trace_kind(ctx.trace).pytorch)}")]
    events, _ = memory_window(ctx)
    device = ctx.args.get("device", "")
    peaks = memory_peaks(events)
    ranged = " in the range" if ctx.number("start_ms") is not None or ctx.number("end_ms") is not None else ""
    cards = [[f"{d} peak allocated{ranged}", units.memory(p) + ("" if b == "allocator" else " (allocated while profiling only)")]
             for d, p, b in peaks.select("device", "peak_allocated", "basis").iter_rows()]  # fmt: skip

    def curve_figure() -> Block:
        # the whole curve, whatever range is chosen: the slider on it is what picks the range;
        # built once per device (plotly's figure objects cost more than the analysis behind them)
        everything = ctx.memo("memory_events", lambda: memory_events(ctx.trace))
        mine = everything.filter(pl.col("device") == device) if device else everything
        fig = extra_figures.memory_range_figure(memory_curve(mine), "Memory over time (drag the slider to filter the tables)")
        return figure(fig, range_for=["memory_ops", "memory_allocations"])

    blocks: list[Block] = [
        {"type": "cards", "items": cards},
        ctx.memo(("memory_figure", device), curve_figure),
        {"type": "range", "for": ["memory_ops", "memory_allocations"]},
        table("memory_ops", "Memory by op in the range", sort="self_alloc_bytes"),
        table("memory_allocations", "Allocations in the range", sort="size"),
    ]  # fmt: skip
    if pairable(events):
        blocks.append({"type": "image", "src": "memory_flow.svg", "title": "Memory flow (time x address), top device"})
    else:
        blocks.append(text("No memory-flow picture: these memory events carry no addresses (PyTorch < 1.10)."))
    return blocks


def timeline(ctx: Ctx) -> list[Block]:
    t = ctx.trace
    windows = step_windows(t)
    if windows.height == 0:
        return [text("No events to draw.", "warn")]
    row = windows.row(0, named=True) if ctx.step is None else None
    if ctx.step is not None:
        chosen = windows.filter(pl.col("step") == ctx.step)
        if chosen.height == 0:
            raise BadParameter(f"no step {ctx.step}")
        row = chosen.row(0, named=True)
    assert row is not None
    label = "whole trace" if row["step"] is None else f"step {row['step']}"
    fig = ctx.memo(("timeline", row["step"]), lambda: extra_figures.timeline_figure(
        t.ops, t.kernels, int(row["start"]), int(row["end"]), f"Timeline, {label} (drag to zoom, double-click to reset)"))
    blocks: list[Block] = [figure(fig)]
    if ctx.step is None and windows.height > 1:
        blocks.insert(0, text(f"Showing the first step; pick another in the left panel ({windows.height} steps)."))
    blocks.append({"type": "link", "href": "export/perfetto", "text": "Export the whole trace for Perfetto (ui.perfetto.dev)",
                   "needs": "perfetto"})  # fmt: skip
    return blocks


VIEWS = {
    "overview": overview,
    "operators": operators,
    "kernels": kernels,
    "modules": modules,
    "roofline": roofline,
    "memory": memory,
    "timeline": timeline,
}
