"""Names the profiler itself writes into a trace, needed from the readers up.

Pure data: the readers (``ingest``) and the model both read these, so they
live below both.
"""

from __future__ import annotations

#: Kineto's profiler-step annotation names (``ProfilerStep#3``); Nsight
#: exports of ``emit_nvtx`` runs carry the same ranges as NVTX markers.
STEP_PREFIX = "ProfilerStep#"

#: Kineto's categories of CUDA device activity: kernels, copies, memsets.
KERNEL_CAT = "kernel"
MEMCPY_CAT = "gpu_memcpy"
MEMSET_CAT = "gpu_memset"

#: Kineto's category of CUPTI range-profiler counter values (one event per
#: profiled range: a kernel, or a step, with each metric under its name).
PROFILER_RANGE_CAT = "cuda_profiler_range"

#: Kineto's category of CUPTI PM-sampling counter events (``ph: "C"``, one
#: event per metric and sample, the value under the empty key ``""``).
HARDWARE_COUNTERS_CAT = "hardware_counters"

#: The process name Kineto gives each GPU's PM-sampling counter track
#: (``"GPU 0 Counters"``): the only place the GPU index is written.
GPU_COUNTER_TRACK = r"^GPU (\d+) Counters$"
