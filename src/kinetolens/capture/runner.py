"""The in-process half of ``kinetolens run``: profile an unmodified script.

``kinetolens run`` (see :mod:`kinetolens.capture.launch`) starts the command
with our ``sitecustomize`` first on PYTHONPATH and the profile settings in
``KINETOLENS_RUN_CONFIG``.  Every Python process started that way calls
:func:`bootstrap`, which only arms a session; nothing is profiled until the
process takes a step:

* the first optimizer to call ``step()`` becomes the step clock (other
  optimizers, e.g. a GAN's second one, are ignored), or
* ``kinetolens.step()`` markers, for loops without an optimizer; the first
  marker turns the optimizer clock off so steps are never counted twice.

So launchers (torchrun, ``mp.spawn`` parents, accelerate) and helper
processes never record anything, and every rank that trains writes its own
trace.  A process that starts profiling removes the settings from its
environment, so its own subprocesses are not profiled.

Step boundaries must fall *between* optimizer steps: torch's global
post-step hooks run inside the ``Optimizer.step#...`` annotation, and a
profiler step taken there would split that annotation across two
``ProfilerStep#`` ranges.  The hook is therefore used to discover the
optimizer; its ``step`` is then wrapped so the profiler steps after torch's
annotated step has returned.  Profiling thus starts after the second
optimizer step (the first one runs inside the annotation), which also keeps
start-up and the first iteration out of the trace.  Once every window is
written the wrapper is removed and the profiler stopped: the rest of the job
runs with zero overhead.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import types
import warnings
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kinetolens.capture import inductor_provenance
from kinetolens.capture.import_hook import when_imported

# The list object itself: kinetolens.step() calls its last entry.
from kinetolens.capture.options import ProfileOptions
from kinetolens.capture.profile import _MARKERS, Profile

ENV_CONFIG = "KINETOLENS_RUN_CONFIG"

_MISSING = object()


def _say(message: str) -> None:
    print(f"kinetolens: {message}", file=sys.stderr, flush=True)


#: What a process tells the launcher, one empty file per event (``PID.EVENT``)
#: in the launcher's status folder: it was armed, it imported torch, it began
#: profiling.  A failure is a ``PID.failed`` file holding the reason.
STATUS_EVENTS = ("armed", "torch", "profiling", "failed")


def _note(config: dict[str, Any], event: str, detail: str = "") -> bool:
    """Tell the launcher about ``event``; False when there is no launcher to tell."""
    folder = config.get("status_dir")
    if not folder:
        return False
    try:
        with open(os.path.join(folder, f"{os.getpid()}.{event}"), "a", encoding="utf-8") as fh:
            fh.write(detail + "\n" if detail else "")
    except OSError:
        return False
    return True


class OptimizerClock:
    """Calls ``on_step`` each time the first optimizer seen finishes a step.

    The global post-step hook adopts the optimizer on its first step; from
    then on the *instance's* ``step`` attribute is wrapped (not the class:
    an LR scheduler made earlier has already replaced ``step`` on the
    instance with its own wrapper, which would bypass a class patch), so the
    profiler steps after torch's annotated step has returned.  If a caller
    bypasses the attribute (it kept an old bound ``step``), the hook itself
    steps as a fallback.
    """

    def __init__(self, on_step: Callable[[], None]) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._on_step = on_step
        self._owner: weakref.ReferenceType[Any] | None = None
        self._inside = 0
        self._installed: tuple[Any, Any] | None = None  # (ours, what it replaced)
        self._handle: Any = register_optimizer_step_post_hook(self._post_hook)

    def _post_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._owner is None:
            self._adopt(optimizer)
        elif self._inside == 0 and self._owner() is optimizer:
            self._on_step()

    def _adopt(self, optimizer: Any) -> None:
        """Wrap ``optimizer.step``.  Runs inside torch's annotated step, so
        this step is not counted."""
        self._owner = weakref.ref(optimizer)
        inner = optimizer.step
        clock = self

        # wraps() keeps torch's and the LR scheduler's markers on ``step``
        # (``hooked``, ``_wrapped_by_lr_sched``), so neither wraps it again.
        @functools.wraps(inner)
        def step(_opt: Any, *a: Any, **kw: Any) -> Any:
            clock._inside += 1
            try:
                out = inner(*a, **kw)
            finally:
                clock._inside -= 1
            clock._on_step()
            return out

        ours = types.MethodType(step, optimizer)
        self._installed = (ours, optimizer.__dict__.get("step", _MISSING))
        optimizer.step = ours

    def detach(self) -> None:
        """Stop counting and restore the optimizer's ``step`` as it was."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        optimizer = self._owner() if self._owner is not None else None
        if self._installed is not None and optimizer is not None:
            ours, replaced = self._installed
            if optimizer.__dict__.get("step") is ours:
                if replaced is _MISSING:
                    del optimizer.step
                else:
                    optimizer.step = replaced
        self._installed = None


class Session:
    """One process's zero-code profile: armed, running, then done."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.state = "armed"
        self.prof: Profile | None = None
        self.clock: OptimizerClock | None = None
        self.use_clock = True
        _MARKERS.append(self.marker)
        when_imported("torch", self._on_torch)
        # Before the script compiles anything: its generated kernels name their source ops and modules.
        inductor_provenance.watch()
        _note(config, "armed")

    def _on_torch(self, _torch: ModuleType) -> None:
        _note(self.config, "torch")
        if self.use_clock and self.state == "armed" and self.clock is None:
            try:
                self.clock = OptimizerClock(self.on_step)
            except Exception as exc:  # an old torch without global step hooks
                _say(f"cannot watch optimizer steps ({exc}); use kinetolens.step() markers")

    def marker(self) -> None:
        """``kinetolens.step()``: explicit markers replace the optimizer clock."""
        self.use_clock = False
        if self.clock is not None:
            self.clock.detach()
            self.clock = None
        self.on_step()

    def on_step(self) -> None:
        """One step boundary: the first starts the profiler."""
        if self.state == "running":
            assert self.prof is not None
            try:
                self.prof.step()
            except Exception as exc:
                self._fail("profiling stopped", exc)
                return
            if self.prof.finished:
                self.close()
        elif self.state == "armed":
            self._start()

    def _start(self) -> None:
        self._forget_environment()
        try:
            prof = Profile(ProfileOptions.from_config(self.config))
            prof._register_marker = False  # markers go through self.marker
            prof.extra_metadata["launch_command"] = self.config.get("command")
            prof.__enter__()
        except Exception as exc:
            self._fail("could not start profiling", exc)
            return
        self.prof = prof
        self.state = "running"
        _note(self.config, "profiling")
        # Registered after torch's own exit handlers, so it runs before them.
        atexit.register(self.close)

    def _forget_environment(self) -> None:
        """One trace per process: subprocesses of a profiled process (data
        loader workers, compile workers, evaluation jobs) stay unprofiled."""
        os.environ.pop(ENV_CONFIG, None)
        site_dir = self.config.get("site_dir")
        entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        kept = [e for e in entries if e and e != site_dir]
        if kept:
            os.environ["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            os.environ.pop("PYTHONPATH", None)

    def _fail(self, what: str, exc: BaseException) -> None:
        hint = ""
        if "utf-8" in str(exc).lower() and self.config.get("with_stack"):
            # torch's Python tracer refuses source file names that are not UTF-8.
            hint = " (a Python file name that is not UTF-8? --no-stack records without stacks)"
        # The launcher reports it once, after the command (every rank of a
        # torchrun job would otherwise print the same line).
        if not _note(self.config, "failed", f"{what}: {exc}{hint}"):
            _say(f"{what}: {type(exc).__name__}: {exc}{hint}")
        self.close()

    def close(self) -> None:
        """Stop for good, writing any window still open (also at exit)."""
        if self.state == "done":
            return
        was_running = self.state == "running"
        self.state = "done"
        if self.clock is not None:
            self.clock.detach()
            self.clock = None
        if self.marker in _MARKERS:
            _MARKERS.remove(self.marker)
        if was_running and self.prof is not None:
            prof, self.prof = self.prof, None
            try:
                with warnings.catch_warnings():
                    # "no trace written" is summarised by the launcher.
                    warnings.simplefilter("ignore", RuntimeWarning)
                    prof.__exit__(None, None, None)
            except Exception as exc:
                if not _note(self.config, "failed", f"could not write the last trace: {exc}"):
                    _say(f"could not write the last trace: {type(exc).__name__}: {exc}")


_SESSION: Session | None = None


def bootstrap() -> Session | None:
    """Arm profiling in this process if ``kinetolens run`` asked for it."""
    global _SESSION
    raw = os.environ.get(ENV_CONFIG)
    if not raw or _SESSION is not None:
        return _SESSION
    try:
        config = json.loads(raw)
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        _say(f"ignoring malformed {ENV_CONFIG} ({exc})")
        return None
    _SESSION = Session(config)
    return _SESSION
