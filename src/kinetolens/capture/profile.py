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

import dataclasses
import functools
import inspect
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from kinetolens.capture import counters as hw_counters
from kinetolens.capture import inductor_provenance, layout
from kinetolens.capture.memory_snapshot import SnapshotRecorder, snapshot_path
from kinetolens.capture.metadata import collect
from kinetolens.capture.options import ProfileOptions, args_doc, keyword_parameters
from kinetolens.capture.profiler_logs import QuietProfilerLogs

if TYPE_CHECKING:
    import torch.profiler

F = TypeVar("F", bound=Callable[..., Any])

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


def _current_cuda_device() -> int:
    """The GPU PM sampling watches: the one this process works on."""
    import torch

    return int(torch.cuda.current_device())


def _default_run_name() -> str:
    """The script's name (``train.py`` -> ``train``), so runs are findable."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 in ("", "-c", "-m", "-"):
        return "default"
    return Path(argv0).stem or "default"


class Profile:
    """One profiling configuration; each ``with`` block (or decorated call)
    is one torch.profiler session.  Use :func:`profile` to make one."""

    def __init__(self, options: ProfileOptions | None = None, /, **torch_kwargs: Any) -> None:
        #: What to record (checked when it was made); ``torch_kwargs`` go to torch.profiler as given.
        self.options = options if options is not None else ProfileOptions()
        if self.options.counters is not None and "experimental_config" in torch_kwargs:
            raise ValueError("kinetolens.profile: pass counters or experimental_config, not both")
        self.torch_kwargs = torch_kwargs
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
        #: The experimental config's keywords kinetolens set (counters, sync events).
        self._experimental: dict[str, Any] = {}
        #: Whether the last window's trace holds counter values (None: no counters asked for, or not written yet).
        self._counters_recorded: bool | None = None
        #: How the counters are collected (``counters.RANGE_PROFILER`` or ``PM_SAMPLING``), None without counters.
        self._counter_path: str | None = None
        self._snapshots: SnapshotRecorder | None = None
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
        o = self.options
        return o.steps is not None and o.repeat > 0 and self._session_traces >= o.repeat

    # -- session ------------------------------------------------------------

    def step(self) -> None:
        """Mark the end of a step.  While running this is torch's own bound
        ``profile.step`` (set as an instance attribute in ``__enter__``;
        with several windows, wrapped by :func:`_without_cycle_warning`)."""
        raise RuntimeError("kinetolens.profile: step() called outside the profiled block")

    def _make_schedule(self) -> Callable[[int], Any]:
        from torch.profiler import ProfilerAction, schedule

        o = self.options
        if o.steps is not None:
            return schedule(skip_first=o.skip, wait=o.wait, warmup=o.warmup, active=o.steps, repeat=o.repeat)
        start = o.skip + o.wait
        record = start + o.warmup

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

        if self.options.activities is not None:
            acts = list(self.options.activities)
        else:
            acts = [ProfilerActivity.CPU]
            if self.options.profile_device and torch.cuda.is_available():
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

        o = self.options
        self._run_dir = Path(o.logdir).resolve() / (o.run or _default_run_name())
        self._session_traces = 0
        self._rank = layout.distributed_rank()
        activities = self._make_activities()
        extra = dict(self.torch_kwargs)
        counters = None if o.counters is None else list(o.counters)
        counter_path = hw_counters.RANGE_PROFILER
        if counters is not None:
            # Before the profiler starts: torch would record no counters, silently.
            counter_path = hw_counters.check_supported(counters, self._cuda)
            if self._counter_path is None:  # once per profile, not per session of a decorated function
                print(hw_counters.path_line(counter_path, o.counters_per_kernel), file=sys.stderr, flush=True)
        self._counter_path = counter_path if counters is not None else None
        if o.memory_snapshot:
            reason = hw_counters.unsupported_reason(self._cuda)
            if reason is not None:
                raise hw_counters.CaptureUnsupportedError(
                    f"kinetolens.profile: cannot record a memory snapshot: {reason}"
                )
        if "experimental_config" not in extra:  # the user's own config is left as it is
            self._experimental = hw_counters.experimental_options(
                counters, o.counters_per_kernel, cuda_profiled=self._cuda, sync_events=o.sync_events,
                path=counter_path, device=_current_cuda_device() if counters is not None else 0,
            )
            if self._experimental:
                extra["experimental_config"] = hw_counters.experimental_config(self._experimental)
        prof = torch.profiler.profile(
            activities=activities,
            schedule=self._make_schedule(),
            on_trace_ready=self._on_trace_ready,
            **o.torch_switches,
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
        if o.memory_snapshot:
            self._snapshots = SnapshotRecorder(self._run_dir, layout.worker_name(self._rank))
            self._snapshots.start()
        inductor_provenance.watch()  # kernels compiled from here on name their source ops and modules
        if o.with_stack:
            from kinetolens.capture.call_sites import record_operator_lines

            self._undo_operator_lines = record_operator_lines()
        if o.sample_rate is not None:
            import torch

            from kinetolens.capture.memory_sampling import MemorySampler

            self._sampler = MemorySampler(o.sample_rate, cuda=self._cuda and torch.cuda.is_available())
            self._sampler.__enter__()
        # Only a schedule of several windows has cycles to warn about; a single
        # window keeps torch's own step, with no wrapper frame per step.
        several_windows = o.steps is not None and o.repeat != 1
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
            if self._snapshots is not None:
                self._snapshots.stop()
                self._snapshots = None
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
                f"{self.options.skip + self.options.wait + self.options.warmup})",
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
        if self._snapshots is not None:
            self._snapshots.dump(snapshot_path(path))
        meta = collect(
            run=self._run_dir.name,
            worker=worker,
            trace_file=path.name,
            window=self._session_traces,
            schedule=self.options.schedule,
            options={**self.options.torch_switches, "activities": self._activity_names, **self._counter_options()},
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
        with_stack = self.options.with_stack
        counter_path = self._counter_path
        import torch

        cuda_live = self._cuda and torch.cuda.is_available()
        if sampler is None and not with_stack and counter_path is None and not cuda_live:
            return prof.export_chrome_trace

        def export(json_path: str) -> None:
            prof.export_chrome_trace(json_path)
            if cuda_live and not hw_counters.gpu_activity_recorded(Path(json_path)):
                print(hw_counters.NO_GPU_ACTIVITY_LINE, file=sys.stderr, flush=True)
            if counter_path is not None:
                self._counters_recorded = hw_counters.recorded(Path(json_path), counter_path)
                if not self._counters_recorded:
                    print(hw_counters.none_recorded_line(counter_path), file=sys.stderr, flush=True)
            if with_stack:
                from kinetolens.capture.call_sites import write_call_stacks

                write_call_stacks(Path(json_path), prof)
            if sampler is not None:
                from kinetolens.capture.memory_sampling import insert_samples

                insert_samples(Path(json_path), sampler.drain(), sampler.device)

        return export

    def _counter_options(self) -> dict[str, Any]:
        o = self.options
        recorded = {
            "sync_events": bool(self._experimental.get("enable_cuda_sync_events")),
            "memory_snapshot": o.memory_snapshot,
        }
        if o.counters is None:
            return recorded
        return {
            "counters": list(o.counters),
            "counters_per_kernel": o.counters_per_kernel,
            "counters_path": self._counter_path,
            "counters_recorded": self._counters_recorded,
            **recorded,
        }

    # -- decorator ----------------------------------------------------------

    def __call__(self, fn: F) -> F:
        """Profile each call of ``fn`` as one session (one trace per call with
        the default open-ended schedule)."""
        if self.options.run is None:
            self.options = dataclasses.replace(self.options, run=getattr(fn, "__name__", None) or "default")

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
def profile(fn: None = None, /, **options: Any) -> Profile: ...


def profile(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Profile a block or a function with torch.profiler.

    ``with kinetolens.profile(steps=5, warmup=2) as prof: ... prof.step()``
    or ``@kinetolens.profile()`` (also bare ``@kinetolens.profile``).  Each
    trace written prints one line to stderr, ``kinetolens: trace written to
    PATH``; ``prof.trace_files`` lists them all.

    The keywords are :class:`~kinetolens.capture.options.ProfileOptions`
    (the signature and the list below are made from it); any other keyword
    is passed to ``torch.profiler.profile`` as given.  With ``with_stack``,
    each op's call line is written into the trace when it is exported (see
    ``capture.call_sites``); counter presets are listed in
    ``capture.counter_presets``; ``sample_rate`` records CUDA allocated and
    reserved bytes, else the process's RSS, as "kinetolens memory sample"
    counter events.
    """
    settings, torch_kwargs = ProfileOptions.split(options)
    prof = Profile(settings, **torch_kwargs)
    prof.announce = True
    if fn is not None:
        return prof(fn)
    return prof


# The real signature and Args section, from the one declaration of the options.
profile.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter("fn", inspect.Parameter.POSITIONAL_ONLY, default=None),
        *keyword_parameters(),
        inspect.Parameter("torch_kwargs", inspect.Parameter.VAR_KEYWORD, annotation="Any"),
    ],
    return_annotation="Any",
)
profile.__doc__ = (
    inspect.cleandoc(profile.__doc__ or "")
    + "\n\n"
    + args_doc()
    + "\n    torch_kwargs: any other torch.profiler.profile keyword.\n"
)
