"""How much kernel time is tied to an op, module, source line, forward op, launch.

Each share is kept as its two sums of kernel time (:class:`Share`), so that
the shares of parts of a trace add up to the whole trace's: a trace read a
step at a time (:mod:`kinetolens.windowed`) adds each window's own kernels.
:func:`kinetolens.analysis.summary.attribution` and
:func:`~kinetolens.analysis.summary.unrecorded_launches` turn them into the
summary's fractions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from kinetolens.analysis.summary_types import Attribution, UnrecordedLaunches
from kinetolens.model.frames import FUNCTION_ONLY_PREFIX
from kinetolens.model.trace import Trace


@dataclass(frozen=True)
class Share:
    """``part`` of ``whole`` (kernel time, ns); no share of nothing."""

    part: float = 0.0
    whole: float = 0.0

    def __add__(self, other: Share) -> Share:
        return Share(self.part + other.part, self.whole + other.whole)

    @property
    def value(self) -> float | None:
        return self.part / self.whole if self.whole else None


def share(frame: pl.DataFrame, condition: pl.Expr) -> Share:
    """The ``dur`` of ``frame``'s rows where ``condition`` holds, of all its ``dur``
    (a filtered sum: the other columns are not copied)."""
    if frame.height == 0:
        return Share()
    part, whole = frame.select(part=pl.col("dur").filter(condition).sum(), whole=pl.col("dur").sum()).row(0)
    return Share(float(part or 0), float(whole or 0))


#: The kernel columns the shares read: selected before any filter, which
#: copies every column it keeps (the kernels table is wide).
_COLUMNS = (
    "kind", "ts", "launch_ts", "dur", "op_id", "module", "source", "launch_id", "external_id", "step",
    "direction", "grad_fn", "fwd_op_id", "graph_id",
)  # fmt: skip

_ATTRIBUTION_SHARES = (
    "op", "module", "source", "source_call_line", "launch", "op_of_recorded_launches",
    "backward_with_forward_op", "gpu_activity_with_op", "graph_replay_with_capture_op", "graph_replay_with_module",
)  # fmt: skip


def kernel_rows(trace: Trace, owned: pl.Expr | None = None) -> pl.DataFrame:
    """The kernels (not copies or sets) with the columns the shares read; ``owned`` keeps some of them."""
    kernels = trace.kernels.select(_COLUMNS).filter(pl.col("kind") == "kernel")
    return kernels if owned is None else kernels.filter(owned)


@dataclass(frozen=True)
class AttributionParts:
    """The sums behind :class:`Attribution`: kernel and backward time (ns) and each share."""

    kernel_ns: float = 0.0
    backward_ns: float = 0.0
    graph_replay_ns: float = 0.0
    shares: dict[str, Share] = field(default_factory=dict)

    def __add__(self, other: AttributionParts) -> AttributionParts:
        names = self.shares.keys() | other.shares.keys()
        return AttributionParts(
            self.kernel_ns + other.kernel_ns,
            self.backward_ns + other.backward_ns,
            self.graph_replay_ns + other.graph_replay_ns,
            {n: self.shares.get(n, Share()) + other.shares.get(n, Share()) for n in names},
        )

    def attribution(self, possible: bool) -> Attribution:
        """The fractions (null where there was no time to share)."""
        return Attribution(
            kernel_time_us=self.kernel_ns / 1000.0,
            backward_time_us=self.backward_ns / 1000.0,
            graph_replay_time_us=self.graph_replay_ns / 1000.0,
            possible=possible,
            **{n: self.shares.get(n, Share()).value for n in _ATTRIBUTION_SHARES},
        )


def attribution_parts(trace: Trace, owned: pl.Expr | None = None) -> AttributionParts:
    """The sums of :class:`Attribution` over the kernels ``owned`` selects (default all)."""
    kernels = kernel_rows(trace, owned)
    backward = kernels.filter(pl.col("direction") == "bprop")
    # AccumulateGrad (and the DDP gradient hooks that run inside it) adds
    # gradients into leaf parameters: no forward op exists to link to.
    differentiating = backward.filter(~pl.col("grad_fn").fill_null("").str.contains("AccumulateGrad"))
    gpu = trace.kernels.select("ts", "launch_ts", "dur", "op_id")
    gpu = gpu if owned is None else gpu.filter(owned)
    replayed = kernels.filter(pl.col("graph_id").is_not_null())
    captured = trace.ops.filter(pl.col("from_capture"))["op_id"]
    shares = {
        "op": share(kernels, pl.col("op_id").is_not_null()),
        "module": share(kernels, pl.col("module").is_not_null()),
        "source": share(kernels, pl.col("source").is_not_null()),
        # The line that made the call, not only the enclosing function.
        "source_call_line": share(kernels, ~pl.col("source").str.starts_with(FUNCTION_ONLY_PREFIX)),
        "launch": share(kernels, pl.col("launch_id").is_not_null()),
        # Kernels whose launch the file never recorded (launched before the
        # profiling window, or CUPTI dropped the runtime record) cannot be
        # attributed by any tool; this is the op fraction of the rest.
        "op_of_recorded_launches": share(kernels.filter(pl.col("launch_id").is_not_null()), pl.col("op_id").is_not_null()),
        "backward_with_forward_op": share(differentiating, pl.col("fwd_op_id").is_not_null()),
        "gpu_activity_with_op": share(gpu, pl.col("op_id").is_not_null()),
        # Kernel time replayed from CUDA/HIP graphs with the op that launched it at capture.
        "graph_replay_with_capture_op": share(replayed, pl.col("op_id").is_in(captured.implode())),
        "graph_replay_with_module": share(replayed, pl.col("module").is_not_null()),
    }
    return AttributionParts(
        kernel_ns=float(kernels["dur"].sum() or 0),
        backward_ns=float(backward["dur"].sum() or 0),
        graph_replay_ns=float(replayed["dur"].sum() or 0),
        shares=shares,
    )


@dataclass(frozen=True)
class UnrecordedParts:
    """The sums behind :class:`UnrecordedLaunches`."""

    share: Share = Share()
    in_steps: Share = Share()
    named: Share = Share()

    def __add__(self, other: UnrecordedParts) -> UnrecordedParts:
        return UnrecordedParts(self.share + other.share, self.in_steps + other.in_steps, self.named + other.named)

    def launches(self) -> UnrecordedLaunches:
        share, in_steps, named = self.share.value, self.in_steps.value, self.named.value
        note = None
        if share:
            where = f"{in_steps:.1%} of it inside steps" if in_steps else "all of it before the first step, in no step"
            if named and named >= share - 1e-12:
                known = "ops taken from the same launches one iteration later"
            elif named:
                known = f"{named:.1%} named by the same launches one iteration later, the rest with no op"
            else:
                known = "no op is known"
            note = f"{share:.1%} of kernel time: launched before profiling began ({where}); {known}"
        return UnrecordedLaunches(share=share, in_steps_share=in_steps, named_share=named, note=note)


def unrecorded_parts(trace: Trace, owned: pl.Expr | None = None) -> UnrecordedParts:
    """The sums of :class:`UnrecordedLaunches` over the kernels ``owned`` selects (default all)."""
    kernels = kernel_rows(trace, owned)
    orphan = pl.col("launch_id").is_null() & (pl.col("external_id").fill_null(0) == 0)
    return UnrecordedParts(
        share=share(kernels, orphan),
        in_steps=share(kernels, orphan & pl.col("step").is_not_null()),
        named=share(kernels, orphan & pl.col("op_id").is_not_null()),
    )
