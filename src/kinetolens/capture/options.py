"""What a capture is asked to do, declared once.

``kinetolens.profile(...)``, ``kinetolens run`` and the process it profiles
all describe a capture with the same :class:`ProfileOptions`: each option's
name, type, default and meaning live here and nowhere else.  The signature
and the ``Args`` section of ``kinetolens.profile`` are made from these fields
(:func:`keyword_parameters`, :func:`args_doc`), ``kinetolens run`` builds one
from its flags, and the profiled child rebuilds it from the JSON the launcher
hands down (:meth:`ProfileOptions.to_config` / :meth:`~ProfileOptions.from_config`).

Light on purpose: importing this module imports neither torch nor the analyzer.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from kinetolens.capture import counters as hw_counters

DEFAULT_LOGDIR = "./kinetolens-runs"
#: Warm-up steps before each window when ``steps`` is given and ``warmup`` is not.
DEFAULT_WARMUP = 2


def _doc(line: str) -> dict[str, str]:
    """A field's metadata: the one line that documents it."""
    return {"doc": line}


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"kinetolens.profile: {name} must be an integer >= {minimum}, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class ProfileOptions:
    """One capture's settings, checked and normalised when made (a bad value
    raises ValueError before any profiling starts)."""

    logdir: str | Path = field(default=DEFAULT_LOGDIR, metadata=_doc("root directory; traces go to LOGDIR/RUN/."))
    run: str | None = field(
        default=None,
        metadata=_doc("run name (a directory); default: the decorated function's name, else the script's name."),
    )
    steps: int | None = field(
        default=None, metadata=_doc("active steps per window; None records to the end of the block.")
    )
    warmup: int | None = field(
        default=None,
        metadata=_doc(
            f"steps profiled but discarded before each window (default {DEFAULT_WARMUP} with steps, else 0)."
        ),
    )
    skip: int = field(default=0, metadata=_doc("steps ignored once at the start."))
    wait: int = field(default=0, metadata=_doc("idle steps before each window."))
    repeat: int = field(default=1, metadata=_doc("number of windows (0 = until the block ends)."))
    activities: Iterable[Any] | None = field(
        default=None,
        metadata=_doc("torch ProfilerActivity list, overriding the default of CPU plus CUDA when available."),
    )
    profile_device: bool = field(default=True, metadata=_doc("False for CPU only."))
    record_shapes: bool = field(default=True, metadata=_doc("record each op's input shapes."))
    with_stack: bool = field(
        default=True, metadata=_doc("record Python stacks, and each op's call line in the exported trace.")
    )
    with_modules: bool = field(default=True, metadata=_doc("record the nn.Module hierarchy."))
    profile_memory: bool = field(default=True, metadata=_doc("record allocator events."))
    with_flops: bool = field(default=False, metadata=_doc("let torch estimate FLOPs of matmuls and convolutions."))
    counters: Iterable[str] | str | None = field(
        default=None,
        metadata=_doc(
            'CUPTI hardware counters: preset names ("roofline", "tensor_cores", "memory") or metric names; '
            "raises CaptureUnsupportedError (a ValueError) where they cannot be collected."
        ),
    )
    counters_per_kernel: bool = field(
        default=True,
        metadata=_doc("measure counters for each kernel separately (slower: kernels are serialized), not each step."),
    )
    sync_events: bool = field(
        default=True,
        metadata=_doc(
            "record CUDA stream, event and device synchronizations (cuda_sync events) where CUDA is profiled: "
            "the critical path's sync edges; not with your own experimental_config."
        ),
    )
    memory_snapshot: bool = field(
        default=False,
        metadata=_doc(
            "record the CUDA caching allocator's history and write its snapshot beside each trace, and on an "
            "out-of-memory error before it propagates (kinetolens memory and pytorch.org/memory_viz read it); "
            "raises CaptureUnsupportedError without CUDA."
        ),
    )
    sample_rate: int | None = field(
        default=None,
        metadata=_doc("sample memory every N dispatched ops into the trace as counter events; None installs nothing."),
    )

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        if self.steps is not None:
            _check_count("steps", self.steps, 1)
        put("warmup", _check_count("warmup", self._resolved_warmup(), 0))
        for name in ("skip", "wait", "repeat"):
            _check_count(name, getattr(self, name), 0)
        run = self.run
        if run is not None and (not isinstance(run, str) or not run or "/" in run or "\\" in run or run in (".", "..")):
            raise ValueError(f"kinetolens.profile: run must be a plain directory name, got {run!r}")
        sample = self.sample_rate
        if sample is not None and (isinstance(sample, bool) or not isinstance(sample, int) or sample < 1):
            raise ValueError(f"kinetolens.profile: sample_rate must be a positive integer, got {sample!r}")
        put("logdir", Path(self.logdir).expanduser())
        if self.activities is not None:
            put("activities", tuple(self.activities))
        if self.counters is not None:
            put("counters", tuple(hw_counters.resolve(self.counters)))
            if not self.profile_device:
                raise hw_counters.CaptureUnsupportedError(
                    "kinetolens.profile: hardware counters are device counters; profile_device=False turns them off"
                )
        for name in ("profile_device", "counters_per_kernel", *TORCH_SWITCHES):
            put(name, bool(getattr(self, name)))

    def _resolved_warmup(self) -> Any:
        if self.warmup is not None:
            return self.warmup
        return DEFAULT_WARMUP if self.steps is not None else 0

    # -- views ---------------------------------------------------------------

    @property
    def schedule(self) -> dict[str, Any]:
        """The schedule as plain data (also stored in the metadata)."""
        return {"skip": self.skip, "wait": self.wait, "warmup": self.warmup, "steps": self.steps, "repeat": self.repeat}

    @property
    def torch_switches(self) -> dict[str, bool]:
        """The ``torch.profiler.profile`` keywords these options set one to one."""
        return {name: getattr(self, name) for name in TORCH_SWITCHES}

    # -- across a process boundary --------------------------------------------

    def to_config(self) -> dict[str, Any]:
        """The options as JSON data, for the profiled child of ``kinetolens run``."""
        if self.activities is not None:
            raise ValueError("kinetolens.profile: activities (torch objects) cannot be handed to another process")
        config = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "activities"}
        config["logdir"] = str(self.logdir)
        if self.counters is not None:
            config["counters"] = list(self.counters)
        return config

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ProfileOptions:
        """The options among ``config``'s keys (other keys are the launcher's own)."""
        return cls(**{name: config[name] for name in NAMES if name in config})

    @classmethod
    def split(cls, keywords: Mapping[str, Any]) -> tuple[ProfileOptions, dict[str, Any]]:
        """``kinetolens.profile``'s keywords -> (our options, the rest for torch.profiler)."""
        ours = {k: v for k, v in keywords.items() if k in NAMES}
        return cls(**ours), {k: v for k, v in keywords.items() if k not in NAMES}


#: Every option's name, in declaration order.
NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ProfileOptions))
#: Options passed to torch.profiler.profile under the same name.
TORCH_SWITCHES = ("record_shapes", "with_stack", "with_modules", "profile_memory", "with_flops")


def keyword_parameters() -> list[inspect.Parameter]:
    """Each option as a keyword-only parameter with its default, for a signature."""
    return [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
        for f in dataclasses.fields(ProfileOptions)
    ]


def args_doc(indent: str = "    ") -> str:
    """A Google-style ``Args`` section: each option and its line."""
    lines = [f"{indent}{f.name}: {f.metadata['doc']}" for f in dataclasses.fields(ProfileOptions)]
    return "Args:\n" + "\n".join(lines)
