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
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kinetolens.capture.layout import TRACE_SUFFIX, new_run_dir, point_latest
from kinetolens.capture.runner import ENV_CONFIG

SITE_DIR = Path(__file__).resolve().parent / "_site"

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


def launch(command: Sequence[str], config: dict[str, Any]) -> LaunchResult:
    """Run ``command`` with profiling armed; wait for it and report.

    ``config`` holds :class:`~kinetolens.capture.profile.Profile` keywords;
    ``logdir`` is made absolute so a script that changes directory still
    writes where the user asked.
    """
    config = dict(config)
    logdir = Path(config.get("logdir", "./kinetolens-runs")).expanduser().resolve()
    config["logdir"] = str(logdir)
    config["command"] = list(command)
    run_dir = new_run_dir(logdir, str(config["run"]))  # this run's own folder
    config["logdir"], config["run"] = str(run_dir.parent), run_dir.name
    env = child_environment(config)
    try:
        child = subprocess.Popen(list(command), env=env)
    except FileNotFoundError:
        print(f"kinetolens: command not found: {command[0]}", file=sys.stderr)
        return _finished(127, run_dir, started=False)
    except PermissionError:
        print(f"kinetolens: permission denied: {command[0]}", file=sys.stderr)
        return _finished(126, run_dir, started=False)

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
    return _finished(exit_status(returncode), run_dir)


def _finished(exit_code: int, run_dir: Path, started: bool = True) -> LaunchResult:
    """The result; ``latest`` moves to a run that wrote traces, an empty run folder goes."""
    traces = sorted(_existing_traces(run_dir))
    if traces:
        point_latest(run_dir)
    else:
        try:
            run_dir.rmdir()
        except OSError:  # something else was written there: keep it
            pass
    return LaunchResult(exit_code, run_dir, traces, started)
