"""What kind of program a trace records: GPU or not, PyTorch or not.

Advice and report sections depend on it: ``pin_memory`` means nothing to a
job without a GPU, ``.item()`` and foreach optimizers nothing to an MPI or
CUDA C++ program, and a kernels chart of a CPU-only trace is empty.  The
answer is derived once here, from the model, so that rules and views read
one flag instead of guessing from names.
"""

from __future__ import annotations

from kinetolens.analysis.inference.phases import detect
from kinetolens.analysis.session import per_trace
from kinetolens.analysis.trace_kind_type import TraceKind
from kinetolens.model.clocks import ClockOffset, gpu_clock_offset
from kinetolens.model.direction import pytorch_names
from kinetolens.model.trace import Trace

#: Formats only the PyTorch profiler writes.
PYTORCH_FORMATS = ("kineto",)


@per_trace
def clock_offset(trace: Trace) -> ClockOffset | None:
    """The GPU clock's offset from the host's over the whole trace (:func:`kinetolens.model.clocks.gpu_clock_offset`),
    computed once per trace for the rules, the summary and the critical path.

    The whole trace, not a step: a step whose stream stays queued has every
    kernel start long after its launch without any offset (hta/ns_resolution_trace:
    four steps run 1,219 kernels back to back, 63-91 ms behind their launches,
    while the first step's start within microseconds)."""
    return gpu_clock_offset(trace)


@per_trace
def trace_kind(trace: Trace) -> TraceKind:
    """The :class:`TraceKind` of ``trace``."""
    modules = trace.ops["module"].null_count() < trace.ops.height
    return TraceKind(
        gpu=trace.kernels.height > 0 or bool(trace.devices),
        pytorch=trace.format.startswith(PYTORCH_FORMATS) or pytorch_names(trace.ops["name"]),
        modules=bool(modules),
        inference=detect(trace).inference,
        aligned_clocks=clock_offset(trace) is None,
    )

