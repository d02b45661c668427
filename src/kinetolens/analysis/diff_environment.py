"""What a trace says about the machine and software that ran it, and where
a diff's two sides differ (:mod:`kinetolens.analysis.diff`): where they do,
every delta mixes the code change with the hardware or software one, and
the views say so before any number."""

from __future__ import annotations

from typing import Any

from kinetolens.analysis.hardware.gpu_spec import trace_device
from kinetolens.formats import RUN_METADATA_KEY
from kinetolens.model.trace import Trace

#: What :func:`environment` reads from a trace, with the words the views use.
ENVIRONMENT: dict[str, str] = {
    "gpu": "GPU",
    "compute_capability": "compute capability",
    "torch": "torch",
    "cuda": "CUDA",
    "world_size": "world size",
}
#: How deep :func:`_find_key` looks into nested trace metadata.
_SEARCH_DEPTH = 4


def _find_key(value: Any, key: str, depth: int = _SEARCH_DEPTH) -> Any:
    """The first ``key`` in nested dicts (breadth first): torch's version sits
    wherever the harness that wrote the trace put it."""
    level = [value]
    for _ in range(depth):
        found = next((d[key] for d in level if isinstance(d, dict) and d.get(key) not in (None, "")), None)
        if found is not None:
            return found
        level = [v for d in level if isinstance(d, dict) for v in d.values() if isinstance(v, dict)]
    return None


def _cuda_version(value: Any) -> str | None:
    """Kineto's ``12040`` as ``12.4``; strings as they are."""
    if isinstance(value, int) and value > 0:
        return f"{value // 1000}.{value % 1000 // 10}"
    return str(value) if value not in (None, "") else None


def environment(trace: Trace) -> dict[str, Any]:
    """What ``trace`` says about the machine and software that ran it (None where it says nothing).

    ``gpu`` and ``compute_capability``: the device that ran the most kernel
    time; ``torch``: a ``torch_version`` anywhere in the trace's metadata
    (kinetolens' run metadata, other harnesses' environment records; Kineto
    itself does not write it); ``cuda``: the CUDA runtime Kineto recorded,
    else the CUDA torch was built with; ``world_size``: ranks in the job.
    """
    meta = trace.metadata
    device = trace_device(trace) or {}
    major, minor = device.get("computeMajor"), device.get("computeMinor")
    run = meta.get(RUN_METADATA_KEY) if isinstance(meta.get(RUN_METADATA_KEY), dict) else {}
    world = trace.world_size if trace.world_size is not None else run.get("world_size")
    torch = _find_key(meta, "torch_version")
    return {
        "gpu": device.get("name") or None,
        "compute_capability": f"{major}.{minor}" if isinstance(major, int) and isinstance(minor, int) else None,
        "torch": str(torch) if torch is not None else None,
        "cuda": _cuda_version(meta.get("cuda_runtime_version")) or _cuda_version(run.get("cuda_version")),
        "world_size": world if isinstance(world, int) else None,
    }


def _side_environment(envs: list[dict[str, Any]]) -> dict[str, Any]:
    """One value per field when the side's traces' :func:`environment` agree, else their distinct values joined."""
    out: dict[str, Any] = {}
    for key in ENVIRONMENT:
        values = list(dict.fromkeys(e[key] for e in envs if e[key] is not None))
        out[key] = values[0] if len(values) == 1 else ", ".join(map(str, values)) if values else None
    return out


def compare_environments(baseline: list[dict[str, Any]], experiment: list[dict[str, Any]]) -> dict[str, Any]:
    """Both sides' :func:`environment` (one per trace), the fields that differ and those a side does not record."""
    base, exp = _side_environment(baseline), _side_environment(experiment)
    known = [k for k in ENVIRONMENT if base[k] is not None and exp[k] is not None]
    return {
        "baseline": base,
        "experiment": exp,
        "differs": [k for k in known if base[k] != exp[k]],
        "unknown": [k for k in ENVIRONMENT if k not in known],
    }


def environment_warning(env: dict[str, Any]) -> str | None:
    """The sentence every diff view puts first when :func:`compare_environments` found a difference."""
    if not env["differs"]:
        return None
    changes = ", ".join(f"{ENVIRONMENT[k]} {env['baseline'][k]} → {env['experiment'][k]}" for k in env["differs"])
    return f"different environments (baseline → experiment): {changes}; the deltas mix this change with the code's"
