"""Everything a report shows, computed once from one trace.

The HTML and markdown reports (and notebooks, through :meth:`ReportData.figures`)
read the same numbers, so the two formats can never disagree.  Each table is an
analysis result as it is; this module only picks, orders and cuts them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import polars as pl

from kinetolens.analysis.idle import idle_breakdown, temporal_breakdown
from kinetolens.analysis.kernels import kernel_table
from kinetolens.analysis.memory import memory_curve, memory_events, memory_peaks
from kinetolens.analysis.module_tree import module_tree
from kinetolens.analysis.ops import op_stats, rank_basis, time_basis
from kinetolens.analysis.overview import step_breakdown
from kinetolens.analysis.recommendations import Finding
from kinetolens.analysis.roofline import op_roofline, roofline_by
from kinetolens.analysis.summary import summarize
from kinetolens.errors import TraceError
from kinetolens.logdir import one_run
from kinetolens.model.steps import without_incomplete_steps
from kinetolens.model.trace import Trace
from kinetolens.registry.gpus import GpuSpec, gpu_spec
from kinetolens.registry.kernel_names import short_names
from kinetolens.views import figures

#: Rows of each ranked table a report shows.
TOP_ROWS = 15
#: How to read the source lines table (both report formats).
SOURCES_NOTE = (
    "file:line is the line of user code that made the call leading to the op; "
    "in func (file:line) means only the enclosing user function is known, entered at that line."
)


@dataclass
class ReportData:
    """The analysis tables of one trace, and the figures drawn from them."""

    trace: Trace
    title: str
    note: str | None
    summary: dict[str, Any]
    findings: list[Finding]
    basis: str
    breakdown: pl.DataFrame
    ops: pl.DataFrame
    kernels: pl.DataFrame
    kernel_names: pl.DataFrame
    modules: pl.DataFrame
    sources: pl.DataFrame
    memory: pl.DataFrame
    memory_peaks: pl.DataFrame
    temporal: pl.DataFrame
    idle: pl.DataFrame
    spec: GpuSpec | None
    roofline_ops: pl.DataFrame | None
    roofline_modules: pl.DataFrame | None
    roofline_note: str | None
    extra: dict[str, Any] = field(default_factory=dict)
    #: The nn.Module tree (:func:`kinetolens.analysis.module_tree.module_tree`).
    module_tree: pl.DataFrame = field(default_factory=pl.DataFrame)

    def figures(self) -> dict[str, go.Figure]:
        """Section name -> figure, in report order."""
        figs = {
            "steps": figures.step_breakdown_figure(self.breakdown),
            "ops": figures.top_ops_figure(self.ops, value=self.basis, top=TOP_ROWS, title=f"Top ops by {self.basis}"),
            "kernels": figures.top_ops_figure(
                self.kernel_names, value="device_total_us", top=TOP_ROWS, kind="pie", title="GPU time by kernel"
            ),
            "tensor_cores": figures.tensor_core_figure(self.kernels),
            "modules": figures.module_icicle_figure(
                self.modules, value=time_basis(self.trace), title=f"{time_basis(self.trace)} by module"
            ),
        }
        if self.spec is not None and self.roofline_ops is not None:
            figs["roofline"] = figures.roofline_figure(self.roofline_ops, self.spec, f"Roofline on {self.spec.name}")
        figs["memory"] = figures.memory_figure(self.memory)
        figs["temporal"] = figures.temporal_figure(self.temporal)
        figs["idle"] = figures.idle_figure(self.idle)
        return figs

    def _repr_html_(self) -> str:
        from kinetolens.views.report_html import render_html

        return render_html(self, standalone=False)


def _roofline(trace: Trace) -> tuple[GpuSpec | None, pl.DataFrame | None, pl.DataFrame | None, str | None]:
    """The roofline tables, or why there are none (unknown GPU, no GPU work)."""
    if trace.kernels.height == 0:
        return None, None, None, "no GPU kernels"
    spec = gpu_spec(trace)
    try:
        ops = op_roofline(trace, spec)
        modules = roofline_by(trace, spec, by="module")
    except TraceError as exc:
        return None, None, None, exc.problem
    return spec, ops, modules, None


def _kernel_names(trace: Trace) -> pl.DataFrame:
    """Kernels grouped by name, longest first (an empty table for a CPU-only trace);
    ``kernel`` (first, so charts label by it) is the short name, ``name`` the recorded one."""
    stats = op_stats(trace, by="kernel").sort("device_total_us", descending=True)
    return stats.select(short_names(stats["name"]).alias("kernel"), pl.all())


def collect(trace: Trace, title: str | None = None, note: str | None = None) -> ReportData:
    """Run every analysis a report shows on ``trace``."""
    summary = summarize(trace)
    basis = rank_basis(trace)  # ops: self time, so nested ops do not repeat their children's work
    ranked = pl.col(basis)
    spec, roof_ops, roof_modules, roof_note = _roofline(trace)
    events = memory_events(trace)
    whole = without_incomplete_steps(trace)  # what `kinetolens idle` covers
    return ReportData(
        trace=trace,
        title=title or Path(trace.path).name,
        note=note,
        summary=summary,
        findings=[Finding(**f) for f in summary["recommendations"]],
        basis=basis,
        breakdown=step_breakdown(trace),
        ops=op_stats(trace).sort(ranked, descending=True, nulls_last=True),
        kernels=kernel_table(trace),
        kernel_names=_kernel_names(trace),
        modules=op_stats(trace, by="module").sort(time_basis(trace), descending=True, nulls_last=True),
        module_tree=module_tree(trace, spec),
        sources=op_stats(trace, by="source").sort(time_basis(trace), descending=True, nulls_last=True),
        memory=memory_curve(events),
        memory_peaks=memory_peaks(events),
        temporal=temporal_breakdown(whole),
        idle=idle_breakdown(whole),
        spec=spec,
        roofline_ops=roof_ops,
        roofline_modules=roof_modules,
        roofline_note=roof_note,
    )


def resolve_target(path: str | Path) -> tuple[Path, str | None]:
    """The trace file a report covers, and a note when it stands for a whole run.

    A file is itself.  A run directory (``kinetolens.logdir`` layout) is
    reported through its first rank, because one rank's full report is
    readable while a thousand are not; the note names the other ranks and
    points to ``kinetolens dist`` for comparing them.  A logdir holding
    exactly one run is that run; several runs are ambiguous and an error.
    """
    p = Path(path)
    if not p.exists():
        raise TraceError(p, "no such file or directory")
    if not p.is_dir():
        return p, None
    traces = one_run(p)
    first = traces[0]
    if len(traces) == 1:
        return first.path, None
    ranks = [t.rank for t in traces if t.rank is not None]
    who = f"rank {first.rank}" if first.rank is not None else f"worker {first.worker}"
    span = f"ranks {min(ranks)}-{max(ranks)}" if ranks else "workers"
    note = (
        f"Run {first.run!r} holds {len(traces)} traces ({span}); this report covers {who} "
        f"({first.path.name}) in full. Compare ranks with `kinetolens dist`."
    )
    return first.path, note
