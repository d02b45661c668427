"""Everything a report shows, computed once from one trace.

The HTML and markdown reports (and notebooks, through :meth:`ReportData.figures`)
read the same numbers, so the two formats can never disagree.  Each table is an
analysis result as it is; this module only picks, orders and cuts them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from kinetolens.analysis.ranks.dist_report import dist_report
from kinetolens.analysis.ranks.distributed import RankSummary
from kinetolens.analysis.gputime.idle import idle_breakdown, temporal_breakdown
from kinetolens.analysis.hardware.kernels import kernel_verdicts, tensor_core_time
from kinetolens.analysis.memory.usage import how_to_record_memory, memory_curve, memory_events, memory_peaks
from kinetolens.analysis.hardware.module_tree import module_tree
from kinetolens.analysis.workload.ops import op_stats, rank_basis_of, time_basis
from kinetolens.analysis.report_windows import WholeTables
from kinetolens.analysis.gputime.overview import step_breakdown
from kinetolens.analysis.finding import Finding
from kinetolens.analysis.hardware.roofline import op_roofline, roofline_by
from kinetolens.analysis.summary import summarize
from kinetolens.analysis.summary_types import Summary
from kinetolens.errors import TraceError, TraceWarning
from kinetolens.logdir import one_run
from kinetolens.analysis.session import warnings_of, whole_steps
from kinetolens.model.trace import Trace
from kinetolens.registry.gpus import GpuSpec
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.registry.kernel_names import short_names
from kinetolens.views import empty_reasons, figures, units
from kinetolens.views.plot_spec import Figure
from kinetolens.views.report_frames import TOP_ROWS
from kinetolens.views.report_phases import iteration_figure, per_phase_tables
from kinetolens.views.critical_path_section import CriticalPathSection, critical_path_section
from kinetolens.views.cross_rank_path_section import CrossRankSection, cross_rank_section

if TYPE_CHECKING:
    from kinetolens.analysis.paths.cross_rank_path import RankGraphs

@dataclass
class CrossRank:
    """Every rank of a run side by side: the ``kinetolens dist`` tables, as they are."""

    overview: dict[str, Any]
    ranks: pl.DataFrame
    steps: pl.DataFrame
    collectives: pl.DataFrame
    stragglers: pl.DataFrame
    findings: list[Finding]
    #: Per parallel dimension, transfer vs arrival skew, clock offsets (empty where a report is built without them).
    dimensions: pl.DataFrame = field(default_factory=pl.DataFrame)
    skew: pl.DataFrame = field(default_factory=pl.DataFrame)
    clocks: pl.DataFrame = field(default_factory=pl.DataFrame)
    #: The critical path across ranks (:func:`kinetolens.views.cross_rank_path_section.cross_rank_section`),
    #: the line saying why there is none, or None where the report was made without the ranks' graphs.
    path: CrossRankSection | str | None = None


def cross_rank(summaries: list[RankSummary], graphs: list[RankGraphs] | str | None = None) -> CrossRank:
    """The cross-rank section from each rank's summary (:func:`kinetolens.analysis.ranks.dist_report.dist_report`
    computes every number, as for ``kinetolens dist``) and, given
    each rank's step graphs, the critical path across ranks."""
    report = dist_report(summaries)
    return CrossRank(
        overview=report.overview,
        ranks=report.ranks,
        steps=report.steps,
        collectives=report.collectives,
        stragglers=report.stragglers,
        findings=list(report.findings),
        dimensions=report.dimensions,
        skew=report.skew,
        clocks=report.clocks,
        path=cross_rank_section(graphs),
    )


@dataclass
class ReportData:
    """The analysis tables of one trace, and the figures drawn from them."""

    trace: Trace
    title: str
    note: str | None
    summary: Summary
    findings: list[Finding]
    basis: str
    breakdown: pl.DataFrame
    ops: pl.DataFrame
    #: ``tc, dur_us`` of every kernel (the Tensor Core split; :func:`kernel_verdicts`).
    kernel_verdicts: pl.DataFrame
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
    #: The nn.Module tree (:func:`kinetolens.analysis.hardware.module_tree.module_tree`).
    module_tree: pl.DataFrame = field(default_factory=pl.DataFrame)
    #: Section (or chart) name -> the one line shown instead of it, saying
    #: why it is left out (:func:`left_out`); its chart and table are not drawn.
    omitted: dict[str, str] = field(default_factory=dict)
    #: Chart name -> the sentence drawn instead of it (:func:`chart_notes`):
    #: a chart with no data, or a Tensor Core pie of one slice.
    chart_notes: dict[str, str] = field(default_factory=dict)
    #: The cross-rank section of a multi-rank run (:func:`cross_rank`), else None.
    cross_rank: CrossRank | None = None
    #: An inference trace's top kernels and ops per phase
    #: (:func:`kinetolens.views.report_phases.per_phase_tables`), else empty.
    phases: dict[str, dict[str, pl.DataFrame]] = field(default_factory=dict)
    #: The critical path of each complete step, or the line saying why there is none.
    critical_path: CriticalPathSection | str | None = None
    #: Section name -> the line saying it is of a sample of the steps (a trace read
    #: a step window at a time: :func:`collect`'s ``whole``), shown under its title.
    sampled: dict[str, str] = field(default_factory=dict)

    def warning_lines(self) -> list[str]:
        """The warnings the overview lists: the loader's and the analyses'. Of a
        trace read a step window at a time, the summary's (the whole file's)
        and those the sections' analyses raised on the sample."""
        if not self.summary.read_in_windows:
            return [str(w) for w in warnings_of(self.trace)]
        raised = [w for w in warnings_of(self.trace) if w not in self.trace.warnings]
        return [str(TraceWarning(w.kind, w.count, w.detail)) for w in self.summary.warnings] + [str(w) for w in raised]

    @property
    def shown_rank(self) -> str:
        """Whose trace the report shows in full: ``rank N`` (from the trace, else
        from the run's file names), for headings beside the cross-rank section."""
        rank = self.trace.rank
        if rank is None and self.cross_rank is not None and self.cross_rank.ranks.height:
            rank = int(self.cross_rank.ranks["rank"].min())  # type: ignore[arg-type]
        return "this rank" if rank is None else f"rank {rank}"

    def figures(self) -> dict[str, Figure]:
        """Section name -> figure, in report order: none for a section left
        out, and never a chart without data (:data:`omitted` says why)."""
        figs = self.all_figures()
        return {name: fig for name, fig in figs.items() if name not in self.omitted and name not in self.chart_notes}

    def all_figures(self) -> dict[str, Figure]:
        """Every chart, those without data included (drawn once, then kept)."""
        if "figures" in self.extra:
            return dict(self.extra["figures"])
        inference = self.summary.inference
        if inference.iterations:  # an inference trace: its iterations instead of steps
            steps = iteration_figure(inference)
        else:
            steps = figures.step_breakdown_figure(self.breakdown)
        figs = {
            "steps": steps,
            "ops": figures.top_ops_figure(self.ops, value=self.basis, top=TOP_ROWS, title=f"Top ops by {units.basis_words(self.basis)}"),
            "kernels": figures.top_ops_figure(
                self.kernel_names, value="device_total_us", top=TOP_ROWS, kind="pie", title="GPU time by kernel"
            ),
            "tensor_cores": figures.tensor_core_figure(self.kernel_verdicts),
            "modules": figures.module_icicle_figure(
                self.modules, value=time_basis(self.trace), title=f"{units.basis_words(time_basis(self.trace))} by module"
            ),
        }
        if self.spec is not None and self.roofline_ops is not None:
            figs["roofline"] = figures.roofline_figure(self.roofline_ops, self.spec, f"Roofline on {self.spec.name}")
        figs["memory"] = figures.memory_figure(self.memory)
        figs["temporal"] = figures.temporal_figure(self.temporal)
        if self.cross_rank is not None:
            figs["cross_ranks"] = figures.rank_step_figure(self.cross_rank.ranks)
        figs["idle"] = figures.idle_figure(self.idle)
        self.extra["figures"] = figs
        return dict(figs)

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


def _kernel_names(stats: pl.DataFrame) -> pl.DataFrame:
    """Kernels grouped by name (``op_stats(trace, by="kernel")``), longest first (an empty
    table for a CPU-only trace); ``kernel`` (first, so charts label by it) is the short
    name, ``name`` the recorded one."""
    stats = stats.sort("device_total_us", descending=True)
    return stats.select(short_names(stats["name"]).alias("kernel"), pl.all())


#: Section name -> its title, as the one line that replaces it starts.
SECTION_TITLES = {
    "ops": "Top ops", "kernels": "Kernels", "modules": "Modules", "sources": "Source lines",
    "memory": "Memory", "idle": "GPU idle time", "roofline": "Roofline",
}  # fmt: skip


def _tensor_core_sentence(kernels: pl.DataFrame) -> str | None:
    """One sentence where the Tensor Core split has a single part (a pie of
    one slice says nothing a sentence does not), else None."""
    by = tensor_core_time(kernels)
    if by.height != 1:
        return None
    tc, us = by.row(0)
    how = {"yes": "on Tensor Cores", "no": "without Tensor Cores"}.get(tc, "in kernels whose Tensor Core use is unknown")
    return f"All {us / 1000:,.3f} ms of GPU time ran {how}."


def left_out(data: ReportData) -> dict[str, str]:
    """Sections without data, each with the line that says why (see :data:`ReportData.omitted`).

    What the program is (:mod:`kinetolens.analysis.trace_kind`, in the
    summary) words the reason: a CPU-only trace has no kernels at all,
    a GPU trace may just have recorded none.
    """
    kind = data.summary.kind
    why: dict[str, str] = {}
    if data.ops.height == 0:
        why["ops"] = empty_reasons.NO_OPS
    if not kind.gpu or data.kernel_names.height == 0:
        why["kernels"] = why["idle"] = empty_reasons.no_kernels(kind)
    if data.roofline_modules is None and data.roofline_note:
        why["roofline"] = why["kernels"] if "kernels" in why else data.roofline_note
    elif data.roofline_ops is not None and data.roofline_ops.filter(pl.col("flops") > 0).height == 0:
        why["roofline"] = empty_reasons.no_flops(kind)
    if not kind.modules:
        why["modules"] = empty_reasons.no_modules(kind)
    if data.sources.height == 0 or data.sources[data.sources.columns[0]].null_count() == data.sources.height:
        why["sources"] = empty_reasons.no_sources(kind)
    if data.memory.height == 0 and data.memory_peaks.height == 0:
        why["memory"] = f"the trace has no memory events ({how_to_record_memory(data.trace.format, kind.pytorch)})"
    return {name: f"{SECTION_TITLES[name]} left out: {reason}." for name, reason in why.items()}


def chart_notes(data: ReportData) -> dict[str, str]:
    """Charts drawn as one sentence instead (see :data:`ReportData.chart_notes`):
    every chart without data, saying why in its own words, and a Tensor
    Core split with one part."""
    notes = {}
    for name, fig in data.all_figures().items():
        if not fig["data"]:
            notes_drawn = fig["layout"].get("annotations")
            message = str(notes_drawn[0]["text"]) if notes_drawn else "no data"
            if re.fullmatch(r"no \w+_us( in \w+)?", message):  # a ranked chart whose values are all zero
                message = "every value is 0, so there is nothing to chart"
            title = fig["layout"].get("title", {}).get("text") or name
            notes[name] = f"{title}: {message}."
    sentence = _tensor_core_sentence(data.kernel_verdicts)
    if sentence:
        notes["tensor_cores"] = sentence
    return notes


def collect(
    trace: Trace,
    title: str | None = None,
    note: str | None = None,
    ranks: list[RankSummary] | None = None,
    graphs: list[RankGraphs] | str | None = None,
    summary: Summary | None = None,
    whole: WholeTables | None = None,
    sampled: str | None = None,
) -> ReportData:
    """Run every analysis a report shows on ``trace`` (and, given the
    summaries of every rank of its run, the cross-rank section; given their
    step graphs too, with the critical path across ranks).

    ``summary``: the trace's :func:`summarize` when the caller has it (the
    command reads it from the cache entry ``kinetolens summary`` wrote, so
    the report does not simulate the recommendations' savings again).

    ``whole``: the step breakdown, op and kernel tables and Tensor Core split
    of a trace read a step window at a time (with its ``summary``); ``trace``
    is then a sample of its whole steps, which ``sampled`` names, and the
    sections taken from it say so (:data:`SAMPLED_SECTIONS`)."""
    summary = summary if summary is not None else summarize(trace)
    gpu = trace.kernels.height > 0 if whole is None else whole.kernels.height > 0
    basis = rank_basis_of(gpu)  # ops: self time, so nested ops do not repeat their children's work
    ranked = pl.col(basis)
    spec, roof_ops, roof_modules, roof_note = _roofline(trace)
    events = memory_events(trace)
    stepped = whole_steps(trace)  # what `kinetolens idle` covers
    data = ReportData(
        trace=trace,
        title=title or Path(trace.path).name,
        note=note,
        summary=summary,
        findings=list(summary.recommendations),
        basis=basis,
        breakdown=step_breakdown(trace) if whole is None else whole.breakdown,
        ops=(op_stats(trace) if whole is None else whole.ops).sort(ranked, descending=True, nulls_last=True),
        kernel_verdicts=kernel_verdicts(trace) if whole is None else whole.kernel_verdicts,
        kernel_names=_kernel_names(op_stats(trace, by="kernel") if whole is None else whole.kernels),
        modules=op_stats(trace, by="module").sort(time_basis(trace), descending=True, nulls_last=True),
        module_tree=module_tree(trace, spec, roof=roof_modules),
        sources=op_stats(trace, by="source").sort(time_basis(trace), descending=True, nulls_last=True),
        memory=memory_curve(events),
        memory_peaks=memory_peaks(events),
        temporal=temporal_breakdown(stepped),
        idle=idle_breakdown(stepped),
        spec=spec,
        roofline_ops=roof_ops,
        roofline_modules=roof_modules,
        roofline_note=roof_note,
        cross_rank=cross_rank(ranks, graphs) if ranks and len(ranks) > 1 else None,
        phases=per_phase_tables(trace) if summary.inference.iterations else {},
        critical_path=critical_path_section(trace),
    )
    data.omitted = left_out(data)
    data.chart_notes = chart_notes(data)
    if sampled is not None:
        _mark_sampled(data, sampled)
    return data


#: The sections of a report of a trace read a step window at a time that are
#: of the sample of its steps (the rest cover every step).
SAMPLED_SECTIONS = ("critical_path", "modules", "sources", "roofline", "memory", "idle")


def _mark_sampled(data: ReportData, sampled: str) -> None:
    """Say under each section of the sample that it is (see :data:`ReportData.sampled`)."""
    line = f"Of {sampled}: the trace was read a step window at a time, and this section is of those steps."
    data.sampled = {name: line for name in SAMPLED_SECTIONS if name not in data.omitted}
    if isinstance(data.critical_path, CriticalPathSection):
        data.critical_path = replace(data.critical_path, notes=[line, *data.critical_path.notes])


def resolve_target(path: str | Path) -> tuple[Path, str | None]:
    """The trace file a report covers, and a note when it stands for a whole run.

    A file is itself.  A run directory (``kinetolens.logdir`` layout) is
    reported through its first rank, because one rank's full report is
    readable while a thousand are not; the note names the other ranks,
    which the report's cross-rank section (:func:`cross_rank`) compares.  A logdir holding
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
        f"Run {first.run!r} holds {len(traces)} traces ({span}): Across ranks compares them "
        f"(as `kinetolens dist`); the rest of this report is {who} ({first.path.name})."
    )
    return first.path, note
