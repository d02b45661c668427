"""``kinetolens demo`` and ``kinetolens run``: the CLI's capture side.

Plain click commands; the main group registers them (``cli.add_command``).
Nothing here imports torch at import time, so ``kinetolens --help`` stays
fast; ``run`` never imports it at all (the profiled child does).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click

from kinetolens.capture.counter_presets import DESCRIPTIONS
from kinetolens.capture.options import DEFAULT_LOGDIR, DEFAULT_WARMUP, ProfileOptions


def _show_analysis(trace: Path) -> None:
    """Print ``kinetolens summary`` and ``kinetolens ops -t 10 -c ...`` for ``trace``,
    going through the main group exactly as typed commands would."""
    try:
        from kinetolens.cli.main import cli
    except ImportError as exc:
        click.echo(f"(analysis commands unavailable: {exc})", err=True)
        return
    from kinetolens import load

    # The columns that fit an 80-column terminal; `kinetolens ops` shows all.
    # A CPU run has no device time: its column would only be zeros.
    on_gpu = load(trace).kernels.height > 0
    compact = "name,calls,host_self_us,host_total_us," + ("device_total_us," if on_gpu else "") + "step_share_pct"
    for args in (["summary", str(trace)], ["ops", str(trace), "-t", "10", "-c", compact]):
        if cli.get_command(click.Context(cli), args[0]) is None:
            click.echo(f"(no '{args[0]}' command in this build; skipped)", err=True)
            continue
        click.echo()
        cli.main(args=args, prog_name="kinetolens", standalone_mode=False)


def _check_cuda() -> None:
    """``--device cuda`` where torch cannot use CUDA: say why, before any work."""
    import torch

    if not torch.backends.cuda.is_built():
        why = f"this torch build ({torch.__version__}) has no CUDA support"
    elif not torch.cuda.is_available():
        why = "no CUDA device is available"
    else:
        return
    raise click.BadParameter(f"cuda: {why}; use --device cpu (or auto)", param_hint="'--device'")


@click.command()
@click.option(
    "--logdir",
    default=DEFAULT_LOGDIR,
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Root directory; the trace goes to LOGDIR/demo/.",
)
@click.option("--steps", default=3, show_default=True, type=click.IntRange(min=1), help="Profiled steps.")
@click.option(
    "--warmup", default=2, show_default=True, type=click.IntRange(min=0), help="Unrecorded steps before them."
)
@click.option(
    "--device",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "cpu", "cuda"]),
    help="auto = CUDA when available.",
)
@click.option("--no-analysis", is_flag=True, help="Only write the trace; skip summary and ops.")
def demo_command(logdir: Path, steps: int, warmup: int, device: str, no_analysis: bool) -> None:
    """Profile a small CNN + transformer training job and analyze its trace.

    Needs torch.  Shows what kinetolens does end to end in a few seconds.
    """
    try:
        from kinetolens.capture.demo_model import run_demo

        if device == "cuda":
            _check_cuda()
        traces = run_demo(logdir, steps=steps, warmup=warmup, device=device)
    except ImportError as exc:
        raise click.ClickException(f"the demo needs torch ({exc})") from exc
    if not traces:
        raise click.ClickException("the demo wrote no trace")
    trace = traces[-1]
    click.echo(f"trace: {trace}")
    if not no_analysis:
        _show_analysis(trace)


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--logdir",
    default=DEFAULT_LOGDIR,
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Root directory; each run writes LOGDIR/RUN/<start time>/, LOGDIR/RUN/latest links to the newest.",
)
@click.option("--run", "run_name", default=None, help="Run name (default: the script or module name).")
@click.option(
    "--steps",
    default=5,
    show_default=True,
    type=click.IntRange(min=0),
    help="Profiled steps per window (0 = until the process exits).",
)
@click.option(
    "--warmup", default=DEFAULT_WARMUP, show_default=True, type=click.IntRange(min=0), help="Unrecorded steps before."
)
@click.option("--skip", default=0, show_default=True, type=click.IntRange(min=0), help="Steps ignored at first.")
@click.option("--repeat", default=1, show_default=True, type=click.IntRange(min=0), help="Windows (0 = no limit).")
@click.option("--cpu-only", is_flag=True, help="Do not profile CUDA activity.")
@click.option("--no-stack", is_flag=True, help="Do not record Python stacks (less overhead).")
@click.option("--no-shapes", is_flag=True, help="Do not record input shapes.")
@click.option("--no-memory", is_flag=True, help="Do not record allocator events.")
@click.option("--no-modules", is_flag=True, help="Do not record nn.Module hierarchy.")
@click.option(
    "--counters",
    default=None,
    metavar="NAMES",
    help="CUPTI hardware counters, comma-separated metric names or presets: "
    + "; ".join(f"{name} ({what})" for name, what in DESCRIPTIONS.items())
    + ".",
)
@click.option(
    "--memory-snapshot", is_flag=True,
    help="Record the CUDA allocator's history; write its snapshot beside each trace, and on an out-of-memory error.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run_command(
    logdir: Path,
    run_name: str | None,
    steps: int,
    warmup: int,
    skip: int,
    repeat: int,
    cpu_only: bool,
    no_stack: bool,
    no_shapes: bool,
    no_memory: bool,
    no_modules: bool,
    counters: str | None,
    command: Sequence[str],
    memory_snapshot: bool = False,
) -> None:
    """Profile an unmodified script; each training process writes one trace.

    \b
      kinetolens run [OPTIONS] -- python train.py ARGS...
      kinetolens run [OPTIONS] -- python -m package.module ARGS...
      kinetolens run [OPTIONS] -- torchrun --nproc_per_node 8 train.py ARGS...

    Steps are optimizer steps: profiling begins once the first optimizer to
    step has stepped twice (start-up stays out of the trace).  Loops without
    an optimizer can mark steps with kinetolens.step().  The command's
    output and exit status pass through unchanged, except that a command
    that succeeded while profiling could not start (counters this machine
    cannot collect, say) exits with status 2.
    """
    from kinetolens.capture.launch import launch, no_trace_reason

    try:  # bad counter names fail here, not in every rank
        options = ProfileOptions(
            logdir=logdir,
            run=run_name or default_run_name(command),
            steps=steps or None,
            warmup=warmup,
            skip=skip,
            repeat=repeat,
            profile_device=not cpu_only,
            with_stack=not no_stack,
            record_shapes=not no_shapes,
            profile_memory=not no_memory,
            with_modules=not no_modules,
            counters=None if counters is None else [c for c in counters.split(",") if c.strip()],
            memory_snapshot=memory_snapshot,
        )
    except ValueError as exc:
        hint = "--counters" if counters is not None and "counter" in str(exc) else "--run"
        raise click.BadParameter(str(exc), param_hint=hint) from exc
    result = launch(command, options)
    if result.traces:
        for trace in result.traces:
            click.echo(f"kinetolens: wrote {trace}", err=True)
        for failure in result.failures:  # e.g. a later window that could not be written
            click.echo(f"kinetolens: warning: {failure}", err=True)
    elif result.started:
        reason = no_trace_reason(result, command, skip + warmup)
        click.echo(f"kinetolens: no trace written to {result.run_dir}: {reason}", err=True)
    # SystemExit, not ctx.exit(): the main entry point runs click with
    # standalone_mode=False, which would swallow an Exit code.
    sys.exit(result.exit_code)


# ``python -m <launcher> ... train.py``: name the run after the script.
_LAUNCHER_MODULES = {"torch.distributed.run", "torch.distributed.launch"}


def default_run_name(command: Sequence[str]) -> str:
    """``python train.py`` -> ``train``; ``python -m pkg.mod`` -> ``mod``;
    ``torchrun ... train.py`` -> ``train``; otherwise the program's name."""
    args = list(command)
    for i, arg in enumerate(args):
        module = None
        if arg == "-m" and i + 1 < len(args):
            module = args[i + 1]
        elif arg.startswith("-m") and len(arg) > 2 and i > 0:
            module = arg[2:]
        if module is not None and module not in _LAUNCHER_MODULES:
            return module.rsplit(".", 1)[-1] or "run"
        if arg.endswith(".py"):
            return Path(arg).stem or "run"
    return Path(args[0]).name if args else "run"
