"""``kinetolens.profile``: torch.profiler with sane defaults, a schedule, the
tb-profiler file layout and run metadata, as a context manager or decorator.

Why a wrapper at all: the raw profiler needs five arguments, a schedule and a
trace handler to produce something worth analyzing, and it writes no record
of what produced the trace.  Why a *thin* one: anything we add to
``step()`` is added to every training step, so while a profile runs,
``prof.step`` *is* torch's bound ``step`` (no extra Python frame); all our
work happens when a window closes and its trace is written.

Schedule: ``skip`` steps are ignored, then ``wait``, ``warmup`` and ``steps``
active steps make one window, ``repeat`` windows in all (0 = until the end).
With ``steps=None`` (the default, like bare torch.profiler) recording starts
after ``skip + warmup`` steps and runs to the end of the block or call, so a
decorated function that never calls ``step()`` is still profiled whole.

torch is imported only when a profile starts, so ``import kinetolens`` stays
cheap and works without torch installed.
"""

from __future__ import annotations

import functools
import inspect
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from kinetolens.capture import counters as hw_counters
from kinetolens.capture import inductor_provenance, layout
from kinetolens.capture.metadata import collect
from kinetolens.capture.profiler_logs import QuietProfilerLogs

if TYPE_CHECKING:
    import torch.profiler

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_LOGDIR = "./kinetolens-runs"
DEFAULT_WARMUP = 2

# What kinetolens.step() advances, innermost last.  A list of bound callables
# keeps a marker to one truthiness test and one call.
_MARKERS: list[Callable[[], None]] = []
# Profiles currently recording; kineto supports one per process.
_RUNNING: list[Profile] = []


#: torch warns, when a second recording window starts, that the events of
#: the first are cleared; kinetolens has written that window's trace by then
#: (``on_trace_ready``), so the warning would only alarm its users.
_CYCLE_WARNING = "Warning: Profiler clears events at the end of each cycle"


def _without_cycle_warning(torch_step: Callable[[], None]) -> Callable[[], None]:
    def step() -> None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_CYCLE_WARNING, category=UserWarning)
            torch_step()

    return step


def _compiled_kernels() -> dict[str, Any]:
    """The run-metadata entry of inductor's generated kernels, if any were recorded."""
    kernels = inductor_provenance.recorded()
    return {inductor_provenance.METADATA_KEY: kernels} if kernels else {}


def step() -> None:
    """Mark a step boundary on the innermost running profile.

    For loops without an optimizer (inference, evaluation) under
    ``kinetolens run``, or code that cannot reach its ``prof`` object.  A
    no-op when nothing is being profiled, so the marker can stay in the code.
    """
    if _MARKERS:
        _MARKERS[-1]()


def _default_run_name() -> str:
    """The script's name (``train.py`` -> ``train``), so runs are findable."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 in ("", "-c", "-m", "-"):
        return "default"
    return Path(argv0).stem or "default"


def _check_count(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"kinetolens.profile: {name} must be an integer >= {minimum}, got {value!r}")
    return value


class Profile:
    """One profiling configuration; each ``with`` block (or decorated call)
    is one torch.profiler session.  Use :func:`profile` to make one."""

    def __init__(
        self,
        *,
        logdir: str | Path = DEFAULT_LOGDIR,
        run: str | None = None,
        steps: int | None = None,
        warmup: int | None = None,
        skip: int = 0,
        wait: int = 0,
        repeat: int = 1,
        activities: Iterable[Any] | None = None,
        profile_device: bool = True,
        record_shapes: bool = True,
        with_stack: bool = True,
        with_modules: bool = True,
        profile_memory: bool = True,
        with_flops: bool = False,
        counters: Iterable[str] | str | None = None,
        counters_per_kernel: bool = True,
        sample_rate: int | None = None,
        **torch_kwargs: Any,
    ) -> None:
        if steps is not None:
            _check_count("steps", steps, 1)
        if warmup is None:
            warmup = DEFAULT_WARMUP if steps is not None else 0
        self.logdir = Path(logdir).expanduser()
        self.run = run
        self.steps = steps
        self.warmup = _check_count("warmup", warmup, 0)
        self.skip = _check_count("skip", skip, 0)
        self.wait = _check_count("wait", wait, 0)
        self.repeat = _check_count("repeat", repeat, 0)
        if run is not None and (not run or "/" in run or "\\" in run or run in (".", "..")):
            raise ValueError(f"kinetolens.profile: run must be a plain directory name, got {run!r}")
        self.activities = list(activities) if activities is not None else None
        self.profile_device = profile_device
        self.options: dict[str, Any] = {
            "record_shapes": record_shapes,
            "with_stack": with_stack,
            "with_modules": with_modules,
            "profile_memory": profile_memory,
            "with_flops": with_flops,
        }
        self.torch_kwargs = torch_kwargs
        #: CUPTI metric names to collect (presets expanded), or None.
        self.counters: list[str] | None = None
        self.counters_per_kernel = bool(counters_per_kernel)
        if counters is not None:
            self.counters = hw_counters.resolve(counters)
            if "experimental_config" in torch_kwargs:
                raise ValueError("kinetolens.profile: pass counters or experimental_config, not both")
            if not profile_device:
                raise hw_counters.CaptureUnsupportedError(
                    "kinetolens.profile: hardware counters are device counters; profile_device=False turns them off"
                )
        if sample_rate is not None and (isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate < 1):
            raise ValueError(f"kinetolens.profile: sample_rate must be a positive integer, got {sample_rate!r}")
        #: Sample memory every this many ops (see ``capture.memory_sampling``), or None.
        self.sample_rate = sample_rate
        self._sampler: Any = None
        self._undo_operator_lines: Callable[[], None] | None = None
        #: Every trace written by this profile, oldest first.
        self.trace_files: list[Path] = []
        #: Print each trace's path to stderr when it is written (``profile()`` does;
        #: ``kinetolens run`` reports its traces itself).
        self.announce = False
        #: Extra keys merged into each metadata file.
        self.extra_metadata: dict[str, Any] = {}
        self._prof: torch.profiler.profile | None = None
        self._session_traces = 0
        self._rank: int | None = None
        self._run_dir: Path | None = None
        self._cuda = False
        self._activity_names: list[str] = []
        self._register_marker = True

    # -- state --------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True between ``__enter__`` and ``__exit__``."""
        return self._prof is not None

    @property
    def finished(self) -> bool:
        """True once every scheduled window of the current session is written;
        further steps record nothing, so a caller may stop early."""
        return self.steps is not None and self.repeat > 0 and self._session_traces >= self.repeat

    @property
    def schedule(self) -> dict[str, Any]:
        """The schedule as plain data (also stored in the metadata)."""
        return {
            "skip": self.skip,
            "wait": self.wait,
            "warmup": self.warmup,
            "steps": self.steps,
            "repeat": self.repeat,
        }

    # -- session ------------------------------------------------------------

    def step(self) -> None:
        """Mark the end of a step.  While running this is torch's own bound
        ``profile.step`` (set as an instance attribute in ``__enter__``;
        with several windows, wrapped by :func:`_without_cycle_warning`)."""
        raise RuntimeError("kinetolens.profile: step() called outside the profiled block")

    def _make_schedule(self) -> Callable[[int], Any]:
        from torch.profiler import ProfilerAction, schedule

        if self.steps is not None:
            return schedule(
                skip_first=self.skip,
                wait=self.wait,
                warmup=self.warmup,
                active=self.steps,
                repeat=self.repeat,
            )
        start = self.skip + self.wait
        record = start + self.warmup

        def open_ended(step_num: int) -> ProfilerAction:
            # Never RECORD_AND_SAVE: the single trace is written at exit.
            if step_num < start:
                return ProfilerAction.NONE
            if step_num < record:
                return ProfilerAction.WARMUP
            return ProfilerAction.RECORD

        return open_ended

    def _make_activities(self) -> list[Any]:
        import torch
        from torch.profiler import ProfilerActivity

        if self.activities is not None:
            acts = list(self.activities)
        else:
            acts = [ProfilerActivity.CPU]
            if self.profile_device and torch.cuda.is_available():
                acts.append(ProfilerActivity.CUDA)
        self._cuda = ProfilerActivity.CUDA in acts
        self._activity_names = [getattr(a, "name", str(a)) for a in acts]
        return acts

    def __enter__(self) -> Profile:
        if self._prof is not None or _RUNNING:
            raise RuntimeError(
                "kinetolens.profile: another profile is already running in this process "
                "(torch supports one profiler at a time)"
            )
        import torch.profiler

        self._run_dir = self.logdir.resolve() / (self.run or _default_run_name())
        self._session_traces = 0
        self._rank = layout.distributed_rank()
        activities = self._make_activities()
        extra = dict(self.torch_kwargs)
        if self.counters is not None:
            # Before the profiler starts: torch would record no counters, silently.
            hw_counters.check_supported(self.counters, self._cuda)
            extra["experimental_config"] = hw_counters.experimental_config(self.counters, self.counters_per_kernel)
        prof = torch.profiler.profile(
            activities=activities,
            schedule=self._make_schedule(),
            on_trace_ready=self._on_trace_ready,
            **self.options,
            **extra,
        )
        self._quiet = QuietProfilerLogs()
        self._quiet.start()  # torch's USDT and allocator log lines off the terminal (profiler_logs.py)
        try:
            prof.__enter__()
        except BaseException:
            self._quiet.stop()
            raise
        self._prof = prof
        inductor_provenance.watch()  # kernels compiled from here on name their source ops and modules
        if self.options["with_stack"]:
            from kinetolens.capture.call_sites import record_operator_lines

            self._undo_operator_lines = record_operator_lines()
        if self.sample_rate is not None:
            import torch

            from kinetolens.capture.memory_sampling import MemorySampler

            self._sampler = MemorySampler(self.sample_rate, cuda=self._cuda and torch.cuda.is_available())
            self._sampler.__enter__()
        # Only a schedule of several windows has cycles to warn about; a single
        # window keeps torch's own step, with no wrapper frame per step.
        several_windows = self.steps is not None and self.repeat != 1
        self.step = _without_cycle_warning(prof.step) if several_windows else prof.step  # type: ignore[method-assign]
        _RUNNING.append(self)
        if self._register_marker:
            _MARKERS.append(self.step)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        prof = self._prof
        if prof is None:
            return
        if self._sampler is not None:
            self._sampler.__exit__(exc_type, exc, tb)  # before the last window is written
        if self._undo_operator_lines is not None:
            self._undo_operator_lines()
            self._undo_operator_lines = None
        try:
            prof.__exit__(exc_type, exc, tb)
        finally:
            self._quiet.stop()
            self._prof = None
            if self._register_marker:
                inductor_provenance.unwatch()  # ``kinetolens run`` watches the whole process
            if self._register_marker and self.step in _MARKERS:
                _MARKERS.remove(self.step)
            del self.step
            _RUNNING.remove(self)
        if exc_type is None and self._session_traces == 0:
            warnings.warn(
                f"kinetolens.profile: no trace written: the block ended after {prof.step_num} "
                f"step() calls, before recording started (skip+wait+warmup = "
                f"{self.skip + self.wait + self.warmup})",
                RuntimeWarning,
                stacklevel=2,
            )

    def _on_trace_ready(self, prof: torch.profiler.profile) -> None:
        """Write one window's trace and its metadata (torch calls this when a
        window closes, inside ``step()`` or at exit)."""
        rank = layout.distributed_rank()
        if rank is None:
            # torch.distributed may already be torn down when the last window
            # is flushed at exit; keep the name the job's other files use.
            rank = self._rank
        self._rank = rank
        worker = layout.worker_name(rank)
        assert self._run_dir is not None
        self._run_dir.mkdir(parents=True, exist_ok=True)
        path = layout.new_trace_path(self._run_dir, worker)
        layout.write_trace(path, self._exporter(prof))
        meta = collect(
            run=self._run_dir.name,
            worker=worker,
            trace_file=path.name,
            window=self._session_traces,
            schedule=self.schedule,
            options={**self.options, "activities": self._activity_names, **self._counter_options()},
            cuda=self._cuda,
            extra={**self.extra_metadata, **_compiled_kernels()},
        )
        layout.write_json(layout.metadata_path(path), meta)
        self._session_traces += 1
        self.trace_files.append(path)
        if self.announce:
            print(f"kinetolens: trace written to {path}", file=sys.stderr, flush=True)

    def _exporter(self, prof: torch.profiler.profile) -> Callable[[str], None]:
        """torch's export, followed by the ops' exact call lines when stacks
        are recorded (``capture.call_sites``) and the window's memory samples
        when sampling."""
        sampler = self._sampler
        with_stack = self.options["with_stack"]
        if sampler is None and not with_stack:
            return prof.export_chrome_trace

        def export(json_path: str) -> None:
            prof.export_chrome_trace(json_path)
            if with_stack:
                from kinetolens.capture.call_sites import write_call_stacks

                write_call_stacks(Path(json_path), prof)
            if sampler is not None:
                from kinetolens.capture.memory_sampling import insert_samples

                insert_samples(Path(json_path), sampler.drain(), sampler.device)

        return export

    def _counter_options(self) -> dict[str, Any]:
        if self.counters is None:
            return {}
        return {"counters": list(self.counters), "counters_per_kernel": self.counters_per_kernel}

    # -- decorator ----------------------------------------------------------

    def __call__(self, fn: F) -> F:
        """Profile each call of ``fn`` as one session (one trace per call with
        the default open-ended schedule)."""
        if self.run is None:
            self.run = getattr(fn, "__name__", None) or "default"

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                if self.running:  # a recursive call is part of the outer session
                    return await fn(*args, **kwargs)
                with self:
                    return await fn(*args, **kwargs)

            wrapper: Any = async_wrapper
        else:

            @functools.wraps(fn)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                if self.running:
                    return fn(*args, **kwargs)
                with self:
                    return fn(*args, **kwargs)

            wrapper = sync_wrapper
        wrapper.trace_files = self.trace_files
        wrapper.profile = self
        return wrapper  # type: ignore[no-any-return]


@overload
def profile(fn: F, /) -> F: ...


@overload
def profile(
    fn: None = None,
    /,
    *,
    logdir: str | Path = ...,
    run: str | None = ...,
    steps: int | None = ...,
    warmup: int | None = ...,
    skip: int = ...,
    wait: int = ...,
    repeat: int = ...,
    activities: Iterable[Any] | None = ...,
    profile_device: bool = ...,
    record_shapes: bool = ...,
    with_stack: bool = ...,
    with_modules: bool = ...,
    profile_memory: bool = ...,
    with_flops: bool = ...,
    counters: Iterable[str] | str | None = ...,
    counters_per_kernel: bool = ...,
    sample_rate: int | None = ...,
    **torch_kwargs: Any,
) -> Profile: ...


def profile(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    logdir: str | Path = DEFAULT_LOGDIR,
    run: str | None = None,
    steps: int | None = None,
    warmup: int | None = None,
    skip: int = 0,
    wait: int = 0,
    repeat: int = 1,
    activities: Iterable[Any] | None = None,
    profile_device: bool = True,
    record_shapes: bool = True,
    with_stack: bool = True,
    with_modules: bool = True,
    profile_memory: bool = True,
    with_flops: bool = False,
    counters: Iterable[str] | str | None = None,
    counters_per_kernel: bool = True,
    sample_rate: int | None = None,
    **torch_kwargs: Any,
) -> Any:
    """Profile a block or a function with torch.profiler.

    ``with kinetolens.profile(steps=5, warmup=2) as prof: ... prof.step()``
    or ``@kinetolens.profile()`` (also bare ``@kinetolens.profile``).  Each
    trace written prints one line to stderr, ``kinetolens: trace written to
    PATH``; ``prof.trace_files`` lists them all.

    Args:
        logdir: root directory; traces go to ``logdir/run/``.
        run: run name (a directory); default: the decorated function's name,
            else the script's name.
        steps: active steps per window; None records to the end of the block.
        warmup: steps profiled but discarded before each window (default 2
            with ``steps``, else 0).
        skip: steps ignored once at the start.
        wait: idle steps before each window.
        repeat: number of windows (0 = until the block ends).
        activities: torch ProfilerActivity list, overriding the default of
            CPU plus CUDA when available.
        profile_device: False for CPU only.
        record_shapes, with_stack, with_modules, profile_memory, with_flops:
            passed to torch.profiler (all on except with_flops).  With
            with_stack, each op's call line is also written into the trace
            when it is exported (see ``capture.call_sites``).
        counters: CUPTI hardware counters: preset names ("roofline",
            "tensor_cores", "memory"; see ``capture.counter_presets``) or
            metric names.  Needs a CUDA build and device; raises
            :class:`~kinetolens.capture.counters.CaptureUnsupportedError`
            (a ValueError) where they cannot be collected.
        counters_per_kernel: measure each kernel separately (slower:
            kernels are serialized) rather than each step range.
        sample_rate: sample memory every N dispatched ops (CUDA allocated
            and reserved bytes, else the process's RSS) into the trace as
            "kinetolens memory sample" counter events; None (default)
            installs nothing.
        torch_kwargs: any other torch.profiler.profile keyword.
    """
    prof = Profile(
        logdir=logdir, run=run, steps=steps, warmup=warmup, skip=skip, wait=wait, repeat=repeat,
        activities=activities, profile_device=profile_device, record_shapes=record_shapes, with_stack=with_stack,
        with_modules=with_modules, profile_memory=profile_memory, with_flops=with_flops, counters=counters,
        counters_per_kernel=counters_per_kernel, sample_rate=sample_rate, **torch_kwargs,
    )  # fmt: skip
    prof.announce = True
    if fn is not None:
        return prof(fn)
    return prof
