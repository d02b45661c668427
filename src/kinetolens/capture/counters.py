"""``counters=[...]``: CUPTI hardware counters through torch.profiler.

torch.profiler accepts counter names in its experimental config and, on a
build or device that cannot collect them, silently records none.  A profile
that was asked for counters and quietly has none is worse than no profile,
so kinetolens checks up front and refuses with one line saying what is
missing.  Names are presets (see :mod:`.counter_presets`) or raw CUPTI metric
names, which contain ``__`` (``dram__bytes_read.sum``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kinetolens.capture.counter_presets import PRESETS


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


def check_supported(metrics: list[str], cuda_profiled: bool) -> None:
    """Raise :class:`CaptureUnsupportedError` unless counters can be collected."""
    reason = unsupported_reason(cuda_profiled)
    if reason is not None:
        raise CaptureUnsupportedError(
            f"kinetolens.profile: cannot collect hardware counters ({', '.join(metrics)}): {reason}"
        )


def experimental_options(
    metrics: list[str] | None, per_kernel: bool, *, cuda_profiled: bool, sync_events: bool
) -> dict[str, Any]:
    """The keywords of torch.profiler's experimental config: the counters
    (``metrics``, None for none) and, where CUDA is profiled, its
    synchronization events (stream, event and device syncs as ``cuda_sync``
    records, which the critical path's sync edges read)."""
    options: dict[str, Any] = {}
    if metrics is not None:
        options.update(profiler_metrics=list(metrics), profiler_measure_per_kernel=per_kernel)
    if cuda_profiled and sync_events:
        options["enable_cuda_sync_events"] = True
    return options


def experimental_config(options: dict[str, Any]) -> Any:
    """torch.profiler's experimental config with ``options`` (:func:`experimental_options`)."""
    from torch.profiler import _ExperimentalConfig

    return _ExperimentalConfig(**options)
