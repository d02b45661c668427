"""``kinetolens report --format md``: the report as GitHub-flavoured markdown.

The same numbers as the HTML report (both read :class:`ReportData`), without
charts, so it reads in a terminal and pastes into a pull request or a CI
job summary.  Tables are cut shorter than in HTML to stay skimmable.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from kinetolens import __version__
from kinetolens.analysis.hardware.kernels import tensor_core_time
from kinetolens.analysis.hardware.module_tree import NO_MODULE, by_depth, by_type
from kinetolens.analysis.workload.ops import time_basis
from kinetolens.analysis.finding import Finding
from kinetolens.views import units
from kinetolens.views.critical_path_report import critical_path_md
from kinetolens.views.cross_rank_path_report import cross_rank_path_md
from kinetolens.views.report_data import ReportData
from kinetolens.views.report_phases import iteration_frame, labels_frame, phase_frame
from kinetolens.views.report_frames import SOURCES_NOTE, breakdown_frame, cross_rank_frames, frame_md, memory_frame, overview_frame

#: Levels of the module tree the markdown report shows (the HTML report opens any of them).
MD_TREE_DEPTH = 1


def _modules_md(data: ReportData) -> str:
    """The module tree down to :data:`MD_TREE_DEPTH`, indented, and its roll-up by module class."""
    tree = data.module_tree
    if tree.height == 0 or tree.filter(pl.col("path") != NO_MODULE).height == 0:
        return "No nn.Module hierarchy in this trace (profile with with_stack=True or with_modules=True).\n"
    shown = by_depth(tree, MD_TREE_DEPTH).with_columns(
        module=pl.concat_str(pl.lit("\u00a0\u00a0").repeat_by(pl.col("depth")).list.join(""), pl.col("name"))
    )
    cols = ["module", "fwd_total_us", "bwd_total_us", "self_us", "total_us", "step_share_pct", "tflops_s", "pct_of_roof"]
    types = ["type", "count", "total_us", "mean_us", "min_us", "max_us", "step_share_pct", "tflops_s", "pct_of_roof"]
    return frame_md(shown, cols, rows=None) + "\nBy module class:\n\n" + frame_md(by_type(tree), types)


def render_md(data: ReportData) -> str:
    """The whole markdown report."""
    basis = data.basis
    out = [f"# kinetolens report: {data.title}\n", f"_{data.trace.path} · {data.trace.format} · kinetolens {__version__}_\n"]
    if data.note:
        out.append(f"> {data.note}\n")
    out += ["## Overview\n", frame_md(overview_frame(data), rows=None, cell_chars=None)]
    if data.summary.inference.iterations:  # an inference trace: its phases instead of steps
        block = data.summary.inference
        out += ["\n### Phases of inference\n", frame_md(iteration_frame(block)), frame_md(labels_frame(block), rows=None, cell_chars=None),
                frame_md(phase_frame(block), rows=None)]  # fmt: skip
    else:
        out += ["\n### Step time (mean per step)\n", frame_md(breakdown_frame(data), rows=None)]
    if data.cross_rank is not None:
        out += _cross_rank_md(data)
    whose = f" for {data.shown_rank}" if data.cross_rank is not None else ""
    out.append(f"\n## Recommendations{whose}\n")
    withheld = data.summary.recommendations_withheld
    if withheld:
        out.append(f"No recommendations: {withheld}.\n")
    elif not data.findings:
        out.append("No rule fired: nothing obvious to change in this trace.\n")
    out += [_card(i, f) for i, f in enumerate(data.findings, 1)]
    if data.summary.recommendations_left_out:
        out.append(f"Not advised: {data.summary.recommendations_left_out}.\n")
    out += critical_path_md(data)
    out += _section(data, "ops", "Top ops", lambda: [frame_md(data.ops, list(dict.fromkeys(["name", "calls", basis, "step_share_pct", "tflops_s", "in_shapes"])))])
    out += _section(data, "kernels", "Top kernels", lambda: [
        frame_md(data.kernel_names, ["kernel", "calls", "device_total_us", "mean_us", "op", "step_share_pct"]), _tensor_cores_md(data)])
    out += _section(data, "modules", "Modules", lambda: [_modules_md(data)])
    sources = ["source", "calls", time_basis(data.trace), "step_share_pct"]  # top-level ops: totals, disjoint
    out += _section(data, "sources", "Source lines", lambda: [SOURCES_NOTE + "\n\n", frame_md(data.sources, sources)])
    out += _section(data, "roofline", "Roofline", lambda: _roofline_md(data))
    out += _section(data, "memory", "Memory", lambda: [frame_md(memory_frame(data), rows=None, cell_chars=None)])
    out += _section(data, "idle", "GPU idle time", lambda: [
        frame_md(data.temporal, ["rank", "kernel_span_us", "compute_pct", "non_compute_pct", "idle_pct"], rows=None),
        frame_md(data.idle.filter(pl.col("idle_us") > 0), ["rank", "stream", "idle_category", "idle_us", "idle_ratio"], rows=None)])
    return "\n".join(part.rstrip("\n") + "\n" for part in out)


def _card(i: int, f: Finding) -> str:
    """A finding in full: title, saving, evidence, change."""
    predicted = f"; predicted step {f.predicted_step_ms:.2f} ms" if f.predicted_step_ms is not None else ""
    return f"{i}. **{f.title}** (saves up to {units.saving_ms(f.saving_ms)} per {f.per}{predicted})  \n   {f.evidence}  \n   _Change:_ {f.change}\n"


def _section(data: ReportData, name: str, title: str, body: Callable[[], list[str]]) -> list[str]:
    """A section, or the one line saying why it is left out (:data:`ReportData.omitted`)."""
    if name in data.omitted:
        return [f"\n_{data.omitted[name]}_\n"]
    sampled = [f"_{data.sampled[name]}_\n"] if name in data.sampled else []
    return [f"\n## {title}\n", *sampled, *body()]


def _tensor_cores_md(data: ReportData) -> str:
    """The Tensor Core split in one line (one sentence where it has one part)."""
    if "tensor_cores" in data.chart_notes:
        return "\n" + data.chart_notes["tensor_cores"] + "\n"
    tc = tensor_core_time(data.kernel_verdicts)
    if not tc.height:
        return ""
    total = float(tc["us"].sum()) or 1.0
    return "\nGPU time by Tensor Core use: " + ", ".join(f"{t} {100 * us / total:.1f}%" for t, us in tc.iter_rows()) + "\n"


def _roofline_md(data: ReportData) -> list[str]:
    if data.roofline_modules is None:
        return [f"No roofline: {data.roofline_note}.\n"]
    assert data.spec is not None
    return [
        f"On {data.spec.name} ({data.spec.dram_gbps:,.0f} GB/s DRAM); modules by time lost to the roof:\n\n",
        frame_md(data.roofline_modules, ["module", "device_us", "pct_of_roof", "lost_us", "bound", "precision"]),
    ]


def _cross_rank_md(data: ReportData) -> list[str]:
    """Every rank side by side: the run, its stragglers in full, the ``kinetolens dist`` tables."""
    assert data.cross_rank is not None
    run = data.cross_rank.overview
    line = f"{run['ranks']} ranks" + (f" of world size {run['world_size']}" if run["world_size"] else "")
    line += f", {run['backend']}" if run["backend"] else ""
    if run["step_ms_mean"] is not None:
        line += (
            f": mean step {run['step_ms_mean']:.2f} ms, from {run['step_ms_min_rank']:.2f} to "
            f"{run['step_ms_max_rank']:.2f} ms per rank (spread {run['step_ms_spread']:.2f} ms)"
        )
    out = ["\n## Across ranks\n", line + ".\n"]
    out += [_card(i, f) for i, f in enumerate(data.cross_rank.findings, 1)] or [
        "No straggler: no rank keeps the others waiting at collectives.\n"
    ]
    out += cross_rank_path_md(data)
    for heading, frame in cross_rank_frames(data).values():
        out += [f"\n### {heading}\n", frame_md(frame, rows=None)]
    return out
