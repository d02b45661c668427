"""The names a trace is read by, each defined once for every layer above the readers.

Which host ranges and kernels are communication, which runtime calls block
the host, what a profiler step is called, which activity kinds are GPU work,
which ops are matrix math, and the words people read for the step-time
categories and critical-path bounds.  Analyses and views import these;
copies drift (``summary`` and ``dist`` once disagreed about which kernels
were communication).  Names the readers need too live in
:mod:`kinetolens.registry` and are re-exported here.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING

from kinetolens.ingest.categories import GPU_ACTIVITY
from kinetolens.registry.trace_names import STEP_PREFIX

if TYPE_CHECKING:  # the rules below build polars expressions; the words need no polars
    import polars as pl

__all__ = [
    "BLOCKING_CALLS", "BOUND_BY", "BOUND_WORDS", "CATEGORY_HEADERS", "CATEGORY_WORDS", "COMM_KERNEL_PREFIX",
    "COMM_LIBRARY_PREFIXES", "COMM_OP_PREFIXES", "C10D_PREFIX", "DEVICE_SYNC_CALLS", "FSDP_PREFIXES", "GLOO_PREFIX", "GPU_ACTIVITY",
    "MATRIX_FAMILIES", "NCCL_PREFIX", "OTHER", "PARAM_COMMS", "STEP_CATEGORIES", "STEP_COLUMNS", "STEP_PREFIX", "STREAM_SYNC_CALLS",
    "DEVICE_ALLOCATION_CALLS", "STREAM_WAIT_CALLS", "SYNCHRONIZING_CALLS", "TIME_BASIS_WORDS", "is_comm_kernel",
    "is_comm_kernel_name", "is_comm_op",
    "is_dataloader", "matrix_ops",
]  # fmt: skip

# -- communication -----------------------------------------------------------------

#: The communication library's own range of one call (``nccl:all_reduce``):
#: NCCL's only enqueues; gloo's does the transfer, on gloo's worker thread.
NCCL_PREFIX = "nccl:"
GLOO_PREFIX = "gloo:"
COMM_LIBRARY_PREFIXES = (NCCL_PREFIX, GLOO_PREFIX)
#: c10d's dispatcher ops (``c10d::allreduce_``): the caller's thread issuing a collective.
C10D_PREFIX = "c10d::"
#: c10d's record function around a collective (sizes, group, ``Seq``), newer torch.
PARAM_COMMS = "record_param_comms"
#: Host ranges that are a collective call, issued or running: time in them is communication.
COMM_OP_PREFIXES = (*COMM_LIBRARY_PREFIXES, C10D_PREFIX, PARAM_COMMS)
#: FSDP's own ranges around its collectives and their copies: FSDP2's
#: ``FSDP::all_gather``, ``FSDP::post_backward_reduce``, FSDP1's
#: ``FullyShardedDataParallel._pre_forward`` ...: what they issue is
#: data-parallel (shard) traffic.
FSDP_PREFIXES = ("FSDP::", "FullyShardedDataParallel.")
#: NCCL and RCCL name their kernels ``ncclKernel_*`` / ``ncclDevKernel_*`` (compared lowercased).
COMM_KERNEL_PREFIX = "nccl"


def is_comm_op(name: pl.Expr) -> pl.Expr:
    """Host ranges (by ``name``) that are a collective call: see :data:`COMM_OP_PREFIXES`."""
    import polars as pl

    return pl.any_horizontal(*(name.str.starts_with(p) for p in COMM_OP_PREFIXES))


def is_comm_kernel_name(name: pl.Expr) -> pl.Expr:
    """Kernels that are NCCL's or RCCL's, by their name alone.  A
    case-insensitive match, not a lowercased copy of every kernel name
    (hundreds of bytes each: 57 MiB at once on a 500 MB trace)."""
    return name.str.contains(f"(?i)^{re.escape(COMM_KERNEL_PREFIX)}")


def is_comm_kernel(kernels: pl.DataFrame) -> pl.Expr:
    """The one rule for a communication kernel: an NCCL/RCCL kernel by name,
    or any kernel a collective call launched itself (its launching op is a
    :func:`is_comm_op` range: a non-NCCL backend's or a custom all-reduce's
    kernels).  A kernel of an ATen op inside a collective (a copy into the
    send buffer) has that op as its launcher and stays compute.
    ``kernels`` only says whether the ``op`` column exists."""
    import polars as pl

    by_name = is_comm_kernel_name(pl.col("name"))
    if "op" not in kernels.columns:
        return by_name
    return by_name | is_comm_op(pl.col("op")).fill_null(False)


# -- host blocking -----------------------------------------------------------------

#: Device-wide synchronizations (wait for every stream).
DEVICE_SYNC_CALLS = ("cudaDeviceSynchronize", "hipDeviceSynchronize")
#: Stream synchronizations (wait for one stream).
STREAM_SYNC_CALLS = ("cudaStreamSynchronize", "hipStreamSynchronize")
#: A stream waits for an event recorded on another: GPU -> GPU, the host does not block.
STREAM_WAIT_CALLS = ("cudaStreamWaitEvent", "hipStreamWaitEvent")
#: Calls that always return only after GPU work finished: device, stream
#: and event syncs, and synchronous copies (``hipMemcpyWithStream`` is what
#: PyTorch's ROCm build uses for ``.item()`` / ``.cpu()``, where CUDA builds
#: use ``cudaMemcpyAsync`` + ``cudaStreamSynchronize``).  The GPU has drained
#: when one returns, so the gap to the next GPU work is idle time it caused.
#: Runtime calls that allocate or free device memory outside any cache: PyTorch's
#: caching allocator makes them once per block, so many in every step mean it is
#: off (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``).  ``*Free`` synchronizes the device.
DEVICE_ALLOCATION_CALLS = frozenset({"cudaMalloc", "cudaFree", "hipMalloc", "hipFree"})
SYNCHRONIZING_CALLS = frozenset(
    {
        *DEVICE_SYNC_CALLS,
        *STREAM_SYNC_CALLS,
        "cudaEventSynchronize",
        "hipEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "hipMemcpy",
        "hipMemcpyWithStream",
    }
)
#: :data:`SYNCHRONIZING_CALLS` plus the calls that block only sometimes:
#: ``*MemcpyAsync`` (synchronous for pageable host memory) and
#: ``*EventQuery`` (a poll; HTA counts it).  HTA's critical-path list: the
#: dependency graph links such a call to the GPU work only where that work
#: ended before the call returned, so one that did not block costs nothing;
#: idle-time attribution cannot tell, and uses :data:`SYNCHRONIZING_CALLS`.
BLOCKING_CALLS = SYNCHRONIZING_CALLS | frozenset(
    {"cudaMemcpyAsync", "hipMemcpyAsync", "cudaEventQuery", "hipEventQuery"}
)

# -- steps and activity ------------------------------------------------------------

#: The DataLoader's ``__next__`` (and DataPipe iteration) record functions.
DATALOADER_PREFIX = "enumerate(DataLoader)#"
DATALOADER_SUFFIX = ".__next__"
DATAPIPE_PREFIX = "enumerate(DataPipe)#"


def is_dataloader(name: pl.Expr) -> pl.Expr:
    """Host ranges that are the input pipeline handing over a batch."""
    return (name.str.starts_with(DATALOADER_PREFIX) & name.str.ends_with(DATALOADER_SUFFIX)) | name.str.starts_with(
        DATAPIPE_PREFIX
    )


# -- matrix ops --------------------------------------------------------------------

#: FLOP-registry families whose ops are matrix math (Tensor / Matrix Core work).
MATRIX_FAMILIES = frozenset({"gemm", "conv", "attention"})


@cache
def matrix_ops() -> frozenset[str]:
    """Op names that are matrix math PyTorch runs on Tensor Cores where it can:
    the FLOP registry's GEMM, convolution and attention formulas (so a new
    ``aiter::gemm_*`` or ``_C::cutlass_scaled_mm`` entry counts at once),
    less the matrix-vector and depthwise ops that run on CUDA cores.
    Imported on first use: the registry is not needed to load a trace."""
    from kinetolens.registry.flops import REGISTRY
    from kinetolens.registry.tensor_cores import CUDA_CORE_MATRIX_OPS

    return frozenset(n for n, e in REGISTRY.items() if e.family in MATRIX_FAMILIES) - CUDA_CORE_MATRIX_OPS


# -- words -------------------------------------------------------------------------

#: Step-time categories, in the priority that gives each instant to one
#: (torch-tb-profiler's Overview order); :data:`OTHER` is every instant none covers.
STEP_CATEGORIES: tuple[str, ...] = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec")
OTHER = "other"
#: The step breakdown's columns: the categories, the time none is busy, and the step's total.
STEP_COLUMNS: tuple[str, ...] = (*STEP_CATEGORIES, OTHER, "total")
#: Short column headers for the categories (80-column terminal tables).
CATEGORY_HEADERS: dict[str, str] = {
    "kernel": "kernel", "memcpy": "memcpy", "memset": "memset", "communication": "comm", "runtime": "runtime",
    "dataloader": "data", "cpu_exec": "cpu", OTHER: "other",
}  # fmt: skip
#: The categories (and the step total) as people read them in labels and sentences.
CATEGORY_WORDS: dict[str, str] = {
    "kernel": "GPU kernels", "memcpy": "memory copies", "memset": "memory sets", "communication": "communication",
    "runtime": "CUDA runtime calls", "dataloader": "data loading", "cpu_exec": "CPU execution",
    OTHER: "idle time (nothing busy)", "total": "step time",
}  # fmt: skip

#: What bounds each edge of a critical path.
BOUND_BY: tuple[str, ...] = (
    "cpu", "data_loading", "launch_overhead", "kernel_gap", "gpu_compute", "gpu_memory", "communication", "sync_wait",
)  # fmt: skip
#: The bounds as people read them, in tables, charts and verdicts.
BOUND_WORDS: dict[str, str] = {
    "cpu": "CPU ops", "data_loading": "data loading", "launch_overhead": "launch overhead",
    "kernel_gap": "kernel gaps", "gpu_compute": "GPU compute", "gpu_memory": "GPU memcpy/memset",
    "communication": "communication", "sync_wait": "sync wait",
}  # fmt: skip
#: The op-time columns tables rank by, as people read them.
TIME_BASIS_WORDS: dict[str, str] = {
    "device_self_us": "GPU self time",
    "device_total_us": "GPU time",
    "host_self_us": "CPU self time",
    "host_total_us": "CPU time",
}
