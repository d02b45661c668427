"""The kind of program a trace records, as a typed value (computed by
:func:`kinetolens.analysis.trace_kind.trace_kind`; the summary keeps it, and
views read it back from the cache without the analyses)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


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
