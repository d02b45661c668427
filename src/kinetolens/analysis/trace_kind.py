"""What kind of program a trace records: GPU or not, PyTorch or not.

Advice and report sections depend on it: ``pin_memory`` means nothing to a
job without a GPU, ``.item()`` and foreach optimizers nothing to an MPI or
CUDA C++ program, and a kernels chart of a CPU-only trace is empty.  The
answer is derived once here, from the model, so that rules and views read
one flag instead of guessing from names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kinetolens.analysis.inference.phases import detect
from kinetolens.analysis.session import per_trace
from kinetolens.model.clocks import ClockOffset, gpu_clock_offset
from kinetolens.model.direction import pytorch_names
from kinetolens.model.trace import Trace

#: Formats only the PyTorch profiler writes.
PYTORCH_FORMATS = ("kineto",)


@dataclass(frozen=True)
class TraceKind:
    """Facts about the profiled program that decide which advice applies."""

    #: The program used a GPU: GPU activity recorded, or the file lists GPUs
    #: (a profile of host activities only still ran on one).
    gpu: bool
    #: The program is PyTorch: written by the PyTorch profiler, or its ops
    #: carry PyTorch's names (an Nsight Systems export of a PyTorch job).
    pytorch: bool
    #: Ops carry ``nn.Module`` paths (``with_modules`` / ``with_stack``).
    modules: bool
    #: The program serves a model (an inference engine's iterations, decode
    #: steps, KV-cache ops or graph replays, and no backward or optimizer):
    #: views show its phases of inference instead of training steps
    #: (:func:`kinetolens.analysis.inference.phases.detect`).
    inference: bool = False
    #: The GPU's clock agrees with the host's (:func:`kinetolens.model.clocks.gpu_clock_offset`):
    #: rules that measure host-GPU gaps (idle after a sync, launch delay) need it,
    #: or they build a saving on the offset.
    aligned_clocks: bool = True

    def to_dict(self) -> dict[str, bool]:
        return asdict(self)


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

