"""Which Kineto event categories mean what, across profiler generations.

Old traces (2020-2021) write ``Operator``/``Kernel``/``Runtime``; current ones
``cpu_op``/``kernel``/``cuda_runtime``.  Everything downstream works with the
normalized ``kind`` below, never with raw category strings.
"""

from __future__ import annotations

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
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "memset": MEMSET,
    "gpu_user_annotation": GPU_ANNOTATION,
    "cuda_profiler_range": PROFILER_RANGE,
    "mtia_ccp_events": KERNEL,
    "privateuse1_kernel": KERNEL,
}

GPU_ACTIVITY = (KERNEL, MEMCPY, MEMSET)


def classify(cat: str | None) -> tuple[bool, str]:
    """Return (is_device_side, kind) for an ``X`` event's category."""
    key = (cat or "").lower()
    kind = DEVICE_KINDS.get(key)
    if kind is not None:
        return True, kind
    return False, HOST_KINDS.get(key, HOST_OTHER)
