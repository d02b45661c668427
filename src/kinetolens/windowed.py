"""Load a trace one step at a time: memory bounded by a step, not by the file.

A 10 GB trace is about 8 GB of tables; its steps are a few megabytes to a
few hundred each.  :func:`open_windows` decodes the file once to Parquet
parts (:mod:`kinetolens.ingest.spill`) and finds the steps from a few
columns of them (:func:`step_index`: the model's own step rules,
:func:`~kinetolens.model.steps.steps_in_parts`, fed a part at a time).
:meth:`Windowed.load` then builds one step's window as a :class:`Trace`:
every range overlapping the step's time, the GPU work running in it, and
the host events back to the launches of that work, so that its kernels keep
their ops and forward ops and the step its start.  Each window owns the
events from its step's start to the next step's (the first and last reach
the trace's ends), so that sums over the windows count every event once.

In a window's trace the step itself is exact (its row of the step breakdown
equals the whole trace's, checked on every trace with steps in the test
corpus); its ``steps`` table holds the whole trace's rows of the steps that
lie in the window, not the partial ones beside them, so that whether a step
ran whole is judged as the whole trace judges it.
"""

from __future__ import annotations

import dataclasses

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kinetolens.errors import shown_path
from kinetolens.ingest.categories import ANNOTATION, GPU_ACTIVITY, OP, RUNTIME, SYNC, device_kind
from kinetolens.ingest.spill import Spill, spill_kineto
from kinetolens.loader import load_steps
from kinetolens.model import Trace, build_trace
from kinetolens.model.amend import apply, with_table
from kinetolens.model.earlier_launches import name_earlier_launches
from kinetolens.model.graph_replay import GRAPH_LAUNCH
from kinetolens.model.steps import step_marks, steps_in_parts
from kinetolens.model.vocabulary import STEP_PREFIX

__all__ = ["StepWindow", "Windowed", "open_windows", "step_index"]

#: A device event's kind as the model names it (kernel, memcpy, ...).
_DEVICE_KIND = device_kind(pl.col("cat"), pl.col("name"), pl.col("kind")).cast(pl.String).alias("kind")


@dataclass(frozen=True)
class StepWindow:
    """The window of one step, or of a run of steps (ns): its events lie in
    ``[lo, hi)``, the launches of its GPU work are looked for from
    ``launches_from`` (the previous step's host start), and it owns the
    events that start in ``own`` (each event of the trace is owned by one
    window: from its step's start to the next step's)."""

    steps: tuple[int, ...]
    lo: int
    hi: int
    launches_from: int
    own: tuple[int, int]

    @property
    def step(self) -> int:
        return self.steps[0]


@dataclass
class Windowed:
    """A trace decoded to disk, loaded a step at a time."""

    path: Path
    spill: Spill
    #: The whole trace's steps table (:func:`step_index`; its ``step_op_id`` is no window's).
    steps: pl.DataFrame

    def windows(self) -> list[StepWindow]:
        """Every step's window, in time order; the first also holds what came
        before the first step, the last what came after the last one."""
        rows = self._ranges()
        if not rows:
            return []
        first, last = self.spill.time_range()
        out = []
        for i, r in enumerate(rows):
            own_lo = first if i == 0 else r["lo"]
            own_hi = rows[i + 1]["lo"] if i + 1 < len(rows) else last + 1
            out.append(StepWindow(
                steps=(r["step"],), lo=min(r["lo"], own_lo), hi=max(r["hi"], own_hi),
                launches_from=rows[i - 1]["ts"] if i else own_lo, own=(own_lo, own_hi),
            ))  # fmt: skip
        return out

    def sample(self, most: int) -> StepWindow | None:
        """One window over a run of at most ``most`` consecutive whole steps in
        the middle of the trace (None without whole steps)."""
        ranges = self._ranges()
        rows = [r for r in ranges if r["complete"]]
        if not rows:
            return None
        start = max(0, (len(rows) - most) // 2)
        run = rows[start : start + most]
        before = [r for r in ranges if r["ts"] < run[0]["ts"]]
        lo, hi = run[0]["lo"], max(r["hi"] for r in run)
        return StepWindow(
            steps=tuple(r["step"] for r in run), lo=lo, hi=hi,
            launches_from=before[-1]["ts"] if before else lo, own=(lo, hi),
        )  # fmt: skip

    def _ranges(self) -> list[dict]:  # type: ignore[type-arg]
        """Each step (time order) with the range its events lie in: its host range and its window."""
        return (
            self.steps.sort("ts")
            .select("step", "ts", "complete", lo=pl.min_horizontal("ts", "start"), hi=pl.max_horizontal("cpu_end", "end"))
            .to_dicts()
        )

    def load(self, window: StepWindow) -> Trace:
        """The trace of ``window``'s events (see the module docstring).  Its
        steps table holds the whole trace's rows of the steps whose range lies
        in the window, not the partial ones beside them."""
        raw = self.spill.window(window.lo, window.hi, window.launches_from)
        trace = name_earlier_launches(build_trace(raw, shown_path(self.path)))
        inside = self.steps.filter(
            (pl.min_horizontal("ts", "start") >= window.lo) & (pl.max_horizontal("cpu_end", "end") <= window.hi)
        )
        # Op ids are the window's own.
        own = trace.steps.select("step", "step_op_id")
        known = inside.drop("step_op_id").join(own, on="step", how="inner", maintain_order="right")
        trace = with_table(trace, "steps", known.select(trace.steps.columns).cast(trace.steps.schema))
        trace = dataclasses.replace(trace, window_of_steps=self.steps.filter(pl.col("complete")).height)
        return apply(trace, load_steps(self.path))

    def has_gpu_work(self) -> bool:
        """Whether the trace holds GPU activities (kernels, copies, sets): the
        model's kernels table is not empty (what ranks ops: device or host time)."""
        kinds = self.spill.scan("device").select(_DEVICE_KIND).filter(pl.col("kind").is_in(GPU_ACTIVITY))
        return kinds.head(1).collect().height > 0

    def first_gpu_start(self) -> int | None:
        """When the trace's first GPU activity started (ns; None without any):
        where the kernels table's ``start_us`` counts from."""
        kinds = self.spill.scan("device").select(_DEVICE_KIND, "ts").filter(pl.col("kind").is_in(GPU_ACTIVITY))
        first = kinds.select(pl.col("ts").min()).collect().item()
        return None if first is None else int(first)

    def numbers_graphs(self) -> bool:
        """Whether kinetolens numbers some of the trace's CUDA/HIP graph replays
        itself (the trace recorded no graph id for their kernels): numbered
        in order of first replay, a window's numbers would not be the whole
        trace's (``graph`` of the kernels, ``op`` of replays under no op)."""
        launches = self.spill.scan("host").filter(
            pl.col("name").str.contains(GRAPH_LAUNCH) & pl.col("correlation").is_not_null()
        ).select("correlation")
        unrecorded = self.spill.scan("device").filter(pl.col("graph_id").fill_null(0) <= 0).select("correlation")
        return launches.join(unrecorded, on="correlation", how="inner").head(1).collect().height > 0

    def traces(self) -> Iterator[tuple[StepWindow, Trace]]:
        """Each step's window and its trace, one at a time (drop each before asking for the next)."""
        for window in self.windows():
            yield window, self.load(window)


def open_windows(path: str | Path, directory: str | Path) -> Windowed:
    """Decode ``path`` (Kineto JSON) into ``directory`` and index its steps."""
    p = Path(path)
    spill = spill_kineto(p, Path(directory))
    return Windowed(path=p, spill=spill, steps=step_index(spill))


def step_index(spill: Spill) -> pl.DataFrame:
    """The whole trace's steps table (:func:`kinetolens.model.steps.steps_in_parts`):
    the ``ProfilerStep#N`` ranges, then each part's ops and GPU activities
    (with their launch time: the first runtime call of their correlation id)
    reduced to the steps' sums, so that memory holds a part and the launch times."""
    is_op = pl.col("kind").cast(pl.String).is_in([OP, ANNOTATION])
    host = spill.scan("host")
    marks = step_marks(
        host.filter(is_op & pl.col("name").str.starts_with(STEP_PREFIX))
        .select("name", "ts", "end")
        .with_row_index("op_id")
        .collect()
    )
    launches = (
        host.filter(pl.col("kind").cast(pl.String).is_in([RUNTIME, SYNC]) & pl.col("correlation").is_not_null())
        .select("correlation", launch_ts="ts")
        .unique(subset=["correlation"], keep="first", maintain_order=True)
        .collect()
    )
    kernels = (
        part.join(launches, on="correlation", how="left", maintain_order="left")
        for part in spill.each_part("device", [_DEVICE_KIND, "ts", "dur", "correlation"])
    )
    ops = spill.each_part("host", ["ts", "name", pl.col("kind").cast(pl.String)], is_op)
    return steps_in_parts(marks, ops, kernels)
