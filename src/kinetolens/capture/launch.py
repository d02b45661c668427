"""The launcher half of ``kinetolens run``: start the command, unmodified,
with profiling armed in every Python process it starts.

The command runs as a child with inherited stdin/stdout/stderr, so its output
is untouched; its exit status becomes ours (a death by signal N becomes
128+N, as a shell reports it).  The only configuration channel is the
environment (``KINETOLENS_RUN_CONFIG`` plus our ``sitecustomize`` first on
PYTHONPATH), which launchers like torchrun pass down to every rank.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kinetolens.capture.layout import TRACE_SUFFIX, new_run_dir, point_latest
from kinetolens.capture.options import ProfileOptions
from kinetolens.capture.runner import ENV_CONFIG
from kinetolens.errors import TraceError

SITE_DIR = Path(__file__).resolve().parent / "_site"
#: Exit status when the command succeeded but profiling could not start.
PROFILING_FAILED = 2

# Defaults for the child's environment, each kept if the user set it.
# Inductor's C++ (CPU) kernels are invisible to the profiler unless each is
# wrapped in a profiler range at code generation, before any profile starts;
# the range costs one disabled-profiler check per kernel call otherwise.
CHILD_DEFAULTS = {"TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE": "1"}

# Ctrl-C reaches the child directly (same process group): the launcher must
# outlive it to report, and must not deliver a second SIGINT that would cut
# the child's own cleanup (and trace flush) short.  Other termination
# signals are sent to the launcher only, so they are passed on.
_IGNORED = ("SIGINT", "SIGQUIT")
_FORWARDED = ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2")


@dataclass
class LaunchResult:
    """How the command ended and what it wrote."""

    exit_code: int
    run_dir: Path
    traces: list[Path] = field(default_factory=list)
    started: bool = True  # False when the command could not be executed
    #: What its Python processes reported (see ``runner.STATUS_EVENTS``):
    #: any armed, any imported torch, any began profiling.
    armed: bool = False
    torch: bool = False
    profiling: bool = False
    #: Why profiling could not start or went wrong, each reason once.
    failures: list[str] = field(default_factory=list)
    #: The signal that killed the command, when one did.
    signal: int | None = None
    #: Files the command left in the run folder that are not finished traces
    #: (a trace cut short when its writer died).
    partial: list[Path] = field(default_factory=list)



def _read_status(folder: Path, result: LaunchResult) -> None:
    """Fold what the processes noted (``PID.EVENT`` files) into ``result``."""
    for entry in sorted(folder.iterdir()):
        event = entry.suffix.lstrip(".")
        if event in ("armed", "torch", "profiling"):
            setattr(result, event, True)
        elif event == "failed":
            for line in entry.read_text(encoding="utf-8", errors="replace").splitlines():
                reason = line.replace("kinetolens.profile: ", "").strip()
                if reason and reason not in result.failures:
                    result.failures.append(reason)


def _existing_traces(run_dir: Path) -> set[Path]:
    return set(run_dir.glob(f"*{TRACE_SUFFIX}")) if run_dir.is_dir() else set()


def child_environment(config: dict[str, Any], base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: ours) plus what arms profiling in the child."""
    env = dict(os.environ if base is None else base)
    for key, value in CHILD_DEFAULTS.items():
        env.setdefault(key, value)
    site_dir = str(SITE_DIR)
    env[ENV_CONFIG] = json.dumps({**config, "site_dir": site_dir})
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = site_dir + (os.pathsep + old if old else "")
    return env


def exit_status(returncode: int) -> int:
    """A Popen return code as a process exit status."""
    return 128 - returncode if returncode < 0 else returncode


def launch(command: Sequence[str], options: ProfileOptions) -> LaunchResult:
    """Run ``command`` with profiling armed; wait for it and report.

    ``options.run`` names the run (required); ``logdir`` is made absolute so
    a script that changes directory still writes where the user asked.
    """
    if options.run is None:
        raise ValueError("launch: options.run must name the run")
    logdir = Path(options.logdir).resolve()
    try:
        run_dir = new_run_dir(logdir, options.run)  # this run's own folder
    except OSError as exc:  # before the command starts: it would run for nothing
        where = Path(exc.filename) if exc.filename else logdir
        raise TraceError(where, f"cannot create the run folder ({exc.strerror or exc})") from None
    config = replace(options, logdir=run_dir.parent, run=run_dir.name).to_config()
    config["command"] = list(command)
    before = _existing_traces(run_dir)
    status = Path(tempfile.mkdtemp(prefix="kinetolens-run-"))
    try:
        config["status_dir"] = str(status)
        result = _run(command, config, run_dir, before, status)
    finally:
        shutil.rmtree(status, ignore_errors=True)
        _settle(run_dir)
    if not result.traces:  # its empty folder is gone: name the run instead
        result.run_dir = run_dir.parent
    return result


def _settle(run_dir: Path) -> None:
    """``latest`` moves to a run folder that holds traces; an empty one goes."""
    if _existing_traces(run_dir):
        point_latest(run_dir)
        return
    try:
        run_dir.rmdir()
    except OSError:  # something else was written there: keep it
        pass


def _run(command: Sequence[str], config: dict[str, Any], run_dir: Path, before: set[Path], status: Path) -> LaunchResult:
    env = child_environment(config)
    try:
        child = subprocess.Popen(list(command), env=env)
    except FileNotFoundError:
        print(f"kinetolens: command not found: {command[0]}", file=sys.stderr)
        return LaunchResult(127, run_dir, started=False)
    except PermissionError:
        print(f"kinetolens: permission denied: {command[0]}", file=sys.stderr)
        return LaunchResult(126, run_dir, started=False)
    except OSError as exc:  # not executable (ENOEXEC), a directory, ...
        print(f"kinetolens: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return LaunchResult(126, run_dir, started=False)

    previous: dict[int, Any] = {}

    def forward(signum: int, _frame: Any) -> None:
        child.send_signal(signum)

    for name in _IGNORED + _FORWARDED:
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        try:
            previous[signum] = signal.signal(signum, signal.SIG_IGN if name in _IGNORED else forward)
        except (ValueError, OSError):  # not the main thread, or not allowed
            pass
    try:
        returncode = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    traces = sorted(_existing_traces(run_dir) - before)
    result = LaunchResult(exit_status(returncode), run_dir, traces, signal=-returncode if returncode < 0 else None)
    if returncode != 0 and run_dir.is_dir():
        result.partial = sorted(p for p in run_dir.iterdir() if p.is_file() and p not in traces
                                and (".tmp" in p.name or p.name.endswith((".part", ".partial"))))  # fmt: skip
    _read_status(status, result)
    if result.exit_code == 0 and result.failures and not traces:
        # The command succeeded, the profile it was run for did not.
        result.exit_code = PROFILING_FAILED
    return result


def _signal_name(signum: int) -> str:
    try:
        return f"{signal.Signals(signum).name} (signal {signum})"
    except ValueError:
        return f"signal {signum}"


def no_trace_reason(result: LaunchResult, command: Sequence[str], skip_warmup: int) -> str:
    """Why a launch that started wrote no trace, from what its processes noted."""
    if result.failures:
        return "; ".join(result.failures)
    if result.profiling and (result.signal is not None or result.exit_code != 0):
        program = Path(command[0]).name if command else "the command"
        how = (f"was killed by {_signal_name(result.signal)}" if result.signal is not None
               else f"exited with status {result.exit_code}")  # fmt: skip
        where = (f"; partial output: {', '.join(str(p) for p in result.partial)}" if result.partial
                 else "; no partial trace was written")  # fmt: skip
        return f"{program} {how} inside the profiling window, before its trace was written{where}"
    if result.profiling:
        return (
            f"no process got through skip + warmup = {skip_warmup} steps after profiling began (it begins "
            "after the second optimizer step, or at the first kinetolens.step() call)"
        )
    program = Path(command[0]).name if command else "the command"
    if result.exit_code != 0:
        ended = f"{program} exited with status {result.exit_code}"
        if not result.armed:
            return f"{ended}, and started no Python process that kinetolens could watch"
        if not result.torch:
            return f"{ended} before importing torch"
        return f"{ended} before profiling began (after the second optimizer step, or at the first kinetolens.step())"
    if not result.armed:
        return (
            f"{program} started no Python process that kinetolens could watch "
            "(kinetolens run profiles Python programs; python -S and -I skip its start-up hook)"
        )
    if not result.torch:
        return f"{program} never imported torch"
    return (
        "no optimizer stepped twice and kinetolens.step() was never called, so profiling never began "
        "(it begins after the second optimizer step, or at the first kinetolens.step() call)"
    )
