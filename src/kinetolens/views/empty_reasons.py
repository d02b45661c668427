"""Why a table has no rows, in one line: the report's left-out sections and
the CLI's empty tables word it the same way.

``kind`` is the trace's :class:`kinetolens.analysis.trace_kind.TraceKind`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kinetolens.analysis.trace_kind_type import TraceKind

NO_OPS = "the trace has no CPU ops or annotated ranges"
#: Steps of a trace without ProfilerStep ranges (the step tables then cover the whole trace).
NO_STEPS = "none marked (no ProfilerStep# range): the whole trace is one step"
#: A GPU-only capture's kernel attribution (its 0% is no attribution that failed).
NO_ATTRIBUTION = "none possible: the trace records no CPU op to tie a kernel to"


def no_ops(kind: TraceKind, nsys: bool = False) -> str:
    """No op rows at all (an Nsight export names its ops after NVTX ranges)."""
    return NO_OPS + (" (Nsight Systems exports get their ops from NVTX ranges; this one has none)" if nsys else "")


def no_flops(kind: TraceKind) -> str:
    """Ops, but none with a FLOP count to put on a roofline."""
    return "no op has a FLOP count" + (
        " (they come from the input shapes: profile with record_shapes=True)"
        if kind.pytorch
        else " (kinetolens counts FLOPs of PyTorch ops from their input shapes)"
    )


def no_modules(kind: TraceKind) -> str:
    """No op carries an ``nn.Module`` path."""
    return (
        "the ops carry no nn.Module paths (profile with with_modules=True or with_stack=True)"
        if kind.pytorch
        else "not a PyTorch program, so there are no nn.Module paths"
    )


NO_ANNOTATIONS = "the trace has no annotations (ProfilerStep#N, record_function or nccl:* ranges)"


def no_sources(kind: TraceKind) -> str:
    """No op carries a call site."""
    return "the ops carry no call sites (profile with with_stack=True)" if kind.pytorch else "the trace has no call sites"


def no_kernels(kind: TraceKind) -> str:
    """No GPU kernel rows."""
    return "no GPU kernels were recorded" if kind.gpu else "a CPU-only trace: no GPU was listed or used"
