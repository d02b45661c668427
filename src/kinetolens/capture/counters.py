"""``counters=[...]``: CUPTI hardware counters through torch.profiler.

torch.profiler accepts counter names in its experimental config and, on a
build or device that cannot collect them, silently records none.  A profile
that was asked for counters and quietly has none is worse than no profile,
so kinetolens checks up front and refuses with one line saying what is
missing.  Names are presets (see :mod:`.counter_presets`) or raw CUPTI metric
names, which contain ``__`` (``dram__bytes_read.sum``).

Two ways to collect them, depending on how torch's Kineto was built
(:func:`counter_paths` reads which from torch's own libraries, since no
Python API says so):

* the **CUPTI range profiler**: torch passes ``profiler_metrics`` to Kineto as
  ``CUPTI_PROFILER_METRICS``; values per kernel (kernels are replayed) or per
  step, as ``cuda_profiler_range`` events;
* **CUPTI PM sampling**, which newer Kineto builds have instead: the GPU's
  counters sampled every millisecond on a ``GPU N Counters`` track
  (``hardware_counters`` events), configured by Kineto's
  ``CUPTI_PM_SAMPLING_METRICS`` / ``CUPTI_PM_SAMPLING_DEVICE_ID`` keys, which
  reach Kineto as lines of torch's ``custom_profiler_config`` (torch writes
  that string into Kineto's ``KEY=value`` config text as it is), and only
  where torch asks Kineto for the ``HARDWARE_COUNTERS`` activity.

The range profiler is used where both exist: its values are per kernel.
"""

from __future__ import annotations

import functools
import mmap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kinetolens.capture.counter_presets import PRESETS
from kinetolens.registry.trace_names import (
    HARDWARE_COUNTERS_CAT,
    KERNEL_CAT,
    MEMCPY_CAT,
    MEMSET_CAT,
    PROFILER_RANGE_CAT,
)


class CaptureUnsupportedError(ValueError):
    """A requested capture feature this torch build, device or configuration
    cannot provide.  A ValueError: the argument cannot be honoured here."""


def resolve(counters: Iterable[str] | str) -> list[str]:
    """Preset and metric names -> CUPTI metric names, in order, each once."""
    if isinstance(counters, str):
        counters = [counters]
    metrics: list[str] = []
    for name in counters:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"kinetolens.profile: counters must be names, got {name!r}")
        name = name.strip()
        if name in PRESETS:
            expanded: Iterable[str] = PRESETS[name]
        elif "__" in name:
            expanded = [name]
        else:
            raise ValueError(
                f"kinetolens.profile: unknown counter {name!r}: use a preset "
                f"({', '.join(sorted(PRESETS))}) or a CUPTI metric name such as 'dram__bytes_read.sum'"
            )
        metrics.extend(m for m in expanded if m not in metrics)
    if not metrics:
        raise ValueError("kinetolens.profile: counters is empty")
    return metrics


def unsupported_reason(cuda_profiled: bool) -> str | None:
    """Why CUPTI counters cannot be collected in this process, or None."""
    import torch

    if getattr(torch.version, "hip", None):
        return f"this torch build ({torch.__version__}) targets ROCm, and CUPTI counters are NVIDIA-only"
    if not torch.backends.cuda.is_built():
        return f"this torch build ({torch.__version__}) has no CUDA support"
    if not torch.autograd.kineto_available():
        return f"this torch build ({torch.__version__}) has no Kineto profiler"
    if not torch.cuda.is_available():
        return "no CUDA device is available"
    if not cuda_profiled:
        return "CUDA activity is not being profiled (activities without CUDA)"
    return None


RANGE_PROFILER = "CUPTI range profiler"
PM_SAMPLING = "CUPTI PM sampling"

#: What a torch build's libraries contain when it offers each path: torch
#: writing the range profiler's config key; Kineto's PM-sampling profiler
#: (its name, compiled in only with PM sampling) and torch naming the
#: activity it needs (Kineto's own table spells it in lower case).
PATH_MARKERS: dict[str, tuple[bytes, ...]] = {
    RANGE_PROFILER: (b"CUPTI_PROFILER_METRICS",),
    PM_SAMPLING: (b"CUPTI PM Sampling", b"HARDWARE_COUNTERS"),
}

#: Metric names only the range profiler computes (Kineto's aggregates).
RANGE_ONLY_PREFIX = "kineto__"


def library_markers(lib_dir: Path, markers: Iterable[bytes]) -> frozenset[bytes]:
    """Which of ``markers`` occur in the torch/Kineto shared libraries under ``lib_dir``."""
    wanted = set(markers)
    found: set[bytes] = set()
    for lib in sorted(lib_dir.glob("lib*.so*")):
        if not (lib.name.startswith(("libtorch", "libkineto"))) or not lib.is_file():
            continue
        with lib.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            found.update(m for m in wanted - found if data.find(m) >= 0)
        if found == wanted:
            break
    return frozenset(found)


def paths_offered(found: frozenset[bytes]) -> tuple[str, ...]:
    """The counter paths whose markers were all found, best first."""
    return tuple(path for path, markers in PATH_MARKERS.items() if all(m in found for m in markers))


@functools.cache
def counter_paths() -> tuple[str, ...]:
    """The counter paths the installed torch offers, best first (read once)."""
    import torch

    markers = [m for ms in PATH_MARKERS.values() for m in ms]
    return paths_offered(library_markers(Path(torch.__file__).parent / "lib", markers))


def check_supported(metrics: list[str], cuda_profiled: bool) -> str:
    """The path the counters will be collected with; raises
    :class:`CaptureUnsupportedError` where none can collect them."""
    reason = unsupported_reason(cuda_profiled)
    offered = counter_paths() if reason is None else ()
    if reason is None and not offered:
        import torch

        reason = (
            f"this torch build ({torch.__version__}) offers neither the CUPTI range profiler "
            "nor CUPTI PM sampling to the profiler"
        )
    if reason is None:
        reason = metrics_reason(metrics, offered[0])
    if reason is not None:
        raise CaptureUnsupportedError(
            f"kinetolens.profile: cannot collect hardware counters ({', '.join(metrics)}): {reason}"
        )
    return offered[0]


def metrics_reason(metrics: list[str], path: str) -> str | None:
    """Why ``path`` cannot collect ``metrics``, or None."""
    range_only = [m for m in metrics if m.startswith(RANGE_ONLY_PREFIX)]
    if path == PM_SAMPLING and range_only:
        return (
            f"{', '.join(range_only)} exist only in the CUPTI range profiler, and this torch build "
            "samples counters (CUPTI PM sampling): ask for CUPTI metric names such as 'sm__cycles_active.avg'"
        )
    return None


def path_line(path: str, per_kernel: bool) -> str:
    """The one line a profile prints about how it collects its counters."""
    if path == RANGE_PROFILER:
        how = "per kernel (each kernel is replayed, so the step runs slower)" if per_kernel else "per step"
        return f"kinetolens: counters: {RANGE_PROFILER}, {how}"
    return (
        f"kinetolens: counters: {PM_SAMPLING}, the GPU's counters every millisecond "
        "('kinetolens counters' spreads them over the kernels)"
    )


#: The category of the events each path writes its values as.
RECORDED_AS = {RANGE_PROFILER: PROFILER_RANGE_CAT, PM_SAMPLING: HARDWARE_COUNTERS_CAT}


def holds_category(trace_json: Path, categories: Iterable[str]) -> bool:
    """Whether the exported (uncompressed) trace holds an event of any of ``categories``."""
    needles = [f'"{cat}"'.encode() for cat in categories]
    with trace_json.open("rb") as f:
        if trace_json.stat().st_size == 0:
            return False
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return any(data.find(needle) >= 0 for needle in needles)


def recorded(trace_json: Path, path: str) -> bool:
    """Whether the exported trace holds any counter value of ``path``: a
    torch build can accept the counters' configuration and still record none
    (its Kineto built without that CUPTI profiler), and the profile then says
    so rather than leave a trace quietly without them."""
    return holds_category(trace_json, [RECORDED_AS[path]])


def gpu_activity_recorded(trace_json: Path) -> bool:
    """Whether a trace profiled with CUDA holds any kernel, copy or memset.
    Under Nsight Compute (or another tool holding CUPTI) Kineto records none
    (``CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED``)."""
    return holds_category(trace_json, [KERNEL_CAT, MEMCPY_CAT, MEMSET_CAT])


#: What a profile prints where a CUDA trace came out without GPU activity.
NO_GPU_ACTIVITY_LINE = (
    "kinetolens: no GPU activity recorded although CUDA was profiled: another profiler may hold CUPTI in this "
    "process (Nsight Compute, Nsight Systems); record the trace in a run of its own "
    "('kinetolens counters TRACE --ncu CSV' pairs ncu's counters with it)"
)


def none_recorded_line(path: str) -> str:
    """The line a profile prints where ``path`` recorded no counter value."""
    import torch

    return (
        f"kinetolens: counters: none recorded: this torch ({torch.__version__}) accepted the {path}'s "
        "configuration but its profiler wrote no counter values (built without that CUPTI profiler?); "
        "the trace has the rest: Nsight Compute can count the same step ('kinetolens counters TRACE --ncu CSV')"
    )


def pm_sampling_config(metrics: list[str], device: int) -> str:
    """torch's ``custom_profiler_config`` that sets Kineto's PM-sampling keys
    (torch writes it after ``CUSTOM_CONFIG=``; each further line is a key)."""
    return "\n".join(
        ["kinetolens", f"CUPTI_PM_SAMPLING_METRICS={','.join(metrics)}", f"CUPTI_PM_SAMPLING_DEVICE_ID={device}"]
    )


def experimental_options(
    metrics: list[str] | None,
    per_kernel: bool,
    *,
    cuda_profiled: bool,
    sync_events: bool,
    path: str = RANGE_PROFILER,
    device: int = 0,
) -> dict[str, Any]:
    """The keywords of torch.profiler's experimental config: the counters
    (``metrics``, None for none, collected by ``path`` on GPU ``device``) and,
    where CUDA is profiled, its synchronization events (stream, event and
    device syncs as ``cuda_sync`` records, which the critical path's sync
    edges read)."""
    options: dict[str, Any] = {}
    if metrics is not None and path == PM_SAMPLING:
        options["custom_profiler_config"] = pm_sampling_config(metrics, device)
    elif metrics is not None:
        options.update(profiler_metrics=list(metrics), profiler_measure_per_kernel=per_kernel)
    if cuda_profiled and sync_events:
        options["enable_cuda_sync_events"] = True
    return options


def experimental_config(options: dict[str, Any]) -> Any:
    """torch.profiler's experimental config with ``options`` (:func:`experimental_options`)."""
    from torch.profiler import _ExperimentalConfig

    return _ExperimentalConfig(**options)
