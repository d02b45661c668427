"""Which Kineto event categories mean what, across profiler generations.

Old traces (2020-2021) write ``Operator``/``Kernel``/``Runtime``; current ones
``cpu_op``/``kernel``/``cuda_runtime``.  Everything downstream works with the
normalized ``kind`` below, never with raw category strings.

Some accelerators put all their device activity in one category: MTIA's
``mtia_ccp_events`` holds compute (``pe_exe``, executables such as
``merge``), DMA transfers (``dma_request``) and stream waits and event
records (``event_wait``, ``event_record``).  For those categories the name
decides (:data:`DEVICE_NAME_KINDS`, :func:`device_kind`): a 7 ms event
wait is the stream waiting, not kernel time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinetolens.registry.trace_names import KERNEL_CAT, MEMCPY_CAT, MEMSET_CAT

if TYPE_CHECKING:  # device_kind builds a polars expression; the names need no polars
    import polars as pl

# Host-side ranges.
OP = "op"                      # an ATen / framework operator
ANNOTATION = "annotation"      # record_function / user ranges, ProfilerStep#N
PYTHON = "python"              # python_function (with_stack) and nn.Module ranges
RUNTIME = "runtime"            # CUDA runtime / driver / other accelerator runtime calls
SYNC = "sync"                  # cuda_sync (event/stream/device synchronization)
HOST_OTHER = "host_other"

# Device-side activity.
KERNEL = "kernel"
MEMCPY = "memcpy"
MEMSET = "memset"
DEVICE_SYNC = "device_sync"   # a stream waiting on an event, or recording one
GPU_ANNOTATION = "gpu_annotation"
PROFILER_RANGE = "profiler_range"  # CUPTI range profiler: one per kernel, counters in args
DEVICE_OTHER = "device_other"

HOST_KINDS = {
    "cpu_op": OP,
    "operator": OP,
    "user_annotation": ANNOTATION,
    "python_function": PYTHON,
    "cuda_runtime": RUNTIME,
    "cuda_driver": RUNTIME,
    "runtime": RUNTIME,
    "mtia_runtime": RUNTIME,
    "privateuse1_runtime": RUNTIME,
    "privateuse1_driver": RUNTIME,
    "xpu_runtime": RUNTIME,
    "cuda_sync": SYNC,
}

DEVICE_KINDS = {
    KERNEL_CAT: KERNEL,
    MEMCPY_CAT: MEMCPY,
    "memcpy": MEMCPY,
    MEMSET_CAT: MEMSET,
    "memset": MEMSET,
    "gpu_user_annotation": GPU_ANNOTATION,
    "cuda_profiler_range": PROFILER_RANGE,
    "mtia_ccp_events": KERNEL,
    "privateuse1_kernel": KERNEL,
}

GPU_ACTIVITY = (KERNEL, MEMCPY, MEMSET)

#: Device categories that mix compute, copies and waits: their events are typed by name.
NAME_TYPED_DEVICE_CATS = ("mtia_ccp_events", "privateuse1_kernel")
#: (regex on the event name, kind) for those categories, first match wins;
#: other names stay kernels.
DEVICE_NAME_KINDS: tuple[tuple[str, str], ...] = (
    (r"(?i)^dma", MEMCPY),
    (r"(?i)^(event_|wait|sync)", DEVICE_SYNC),
)


def classify(cat: str | None) -> tuple[bool, str]:
    """Return (is_device_side, kind) for an ``X`` event's category."""
    key = (cat or "").lower()
    kind = DEVICE_KINDS.get(key)
    if kind is not None:
        return True, kind
    return False, HOST_KINDS.get(key, HOST_OTHER)


def device_kind(cat: pl.Expr, name: pl.Expr, kind: pl.Expr) -> pl.Expr:
    """``kind``, except for events of :data:`NAME_TYPED_DEVICE_CATS`, typed by
    :data:`DEVICE_NAME_KINDS` (a String expression)."""
    import polars as pl

    typed: pl.Expr = pl.lit(KERNEL)
    for pattern, named in reversed(DEVICE_NAME_KINDS):
        typed = pl.when(name.str.contains(pattern)).then(pl.lit(named)).otherwise(typed)
    return pl.when(cat.cast(pl.String).str.to_lowercase().is_in(NAME_TYPED_DEVICE_CATS)).then(typed).otherwise(
        kind.cast(pl.String)
    )
