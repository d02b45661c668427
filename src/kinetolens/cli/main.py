"""The ``kinetolens`` command.  Bad input ends with one line and exit 2."""

from __future__ import annotations

import importlib
import os
import sys
import threading
from typing import NamedTuple

import click

from kinetolens import __version__
from kinetolens._allocator import tune_allocator
from kinetolens.cli.checks import one_line
from kinetolens.errors import TraceError

EXIT_BAD_INPUT = 2


class Entry(NamedTuple):
    """Where a command lives, and the line ``kinetolens --help`` shows for it."""

    module: str
    attribute: str
    short_help: str
    #: The command runs the user's code in this process (a script, a training
    #: job): its exit handlers must run, so :func:`run` ends it the usual way.
    user_code: bool = False


#: Every command, imported only when it runs or its own help is shown: the
#: command modules pull in polars, rich and the analyses, which
#: ``kinetolens --help`` does not need.  ``short_help`` is the line the
#: command list shows (cut to the terminal's width), the gist of its help.
COMMANDS: dict[str, Entry] = {
    "summary": Entry(
        "kinetolens.cli.summary_command", "summary_command", "What TRACE is, and how well its kernels are attributed."
    ),
    "kernels": Entry(
        "kinetolens.cli.analysis_commands",
        "kernels_command",
        "One row per GPU kernel: layer, op, shapes, direction, time (PyProf's report).",
    ),
    "ops": Entry(
        "kinetolens.cli.analysis_commands",
        "ops_command",
        "Top ops by device/host time (MegEngine profile_analyze options).",
    ),
    "modules": Entry(
        "kinetolens.cli.modules_command",
        "modules_command",
        "GPU time per nn.Module: forward and backward, self and total, FLOPs and % of roofline.",
    ),
    "phases": Entry(
        "kinetolens.cli.phases_command",
        "phases_command",
        "An inference trace's engine iterations, each labelled prefill, decode or mixed.",
    ),
    "compiled": Entry(
        "kinetolens.cli.compiled_command",
        "compiled_command",
        "Kernels torch.compile generated (inductor C++ and Triton): the source ops and nn.Modules each fuses.",
    ),
    "demo": Entry(
        "kinetolens.cli.capture_commands",
        "demo_command",
        "Profile a small CNN + transformer training job and analyze its trace.",
        user_code=True,
    ),
    "run": Entry(
        "kinetolens.cli.capture_commands",
        "run_command",
        "Profile an unmodified script; each training process writes one trace.",
        user_code=True,
    ),
    "memory": Entry(
        "kinetolens.cli.memory_command",
        "memory_command",
        "Memory per device: peak with its op and module, top allocating ops, leaks.",
    ),
    "counters": Entry(
        "kinetolens.cli.counters_command",
        "counters_command",
        "CUPTI counters of each kernel in TRACE, with its op stack, FLOPs and DRAM bytes.",
    ),
    "idle": Entry(
        "kinetolens.cli.gpu_time_commands",
        "idle_command",
        "GPU busy / idle time, kernel types and their overlap, and why each stream idles.",
    ),
    "launches": Entry(
        "kinetolens.cli.gpu_time_commands",
        "launches_command",
        "Launch cost and delay per launch call, launch-bound kernels, graph launches, queue depth, copy bandwidth.",
    ),
    "roofline": Entry(
        "kinetolens.cli.roofline_command",
        "roofline_command",
        "Time each op (or module) loses to its roofline in TRACE.",
    ),
    "dist": Entry(
        "kinetolens.cli.dist_command",
        "dist_command",
        "Step time per rank, computation / communication overlap, collectives and stragglers.",
    ),
    "hang": Entry(
        "kinetolens.cli.hang_command",
        "hang_command",
        "From flight recorder dumps: each rank's last collective, the ranks that never joined the stuck one, desyncs.",
    ),
    "serve": Entry(
        "kinetolens.cli.serve_command",
        "serve_command",
        "Browse the runs under LOGDIR in a web browser.",
    ),
    "diff": Entry(
        "kinetolens.cli.diff_command",
        "diff_command",
        "Compare EXPERIMENT with BASELINE per step.",
    ),
    "report": Entry(
        "kinetolens.cli.report_command",
        "report_command",
        "Overview, recommendations, top ops, kernels, modules, roofline, memory and GPU idle time in one file.",
    ),
    "export": Entry(
        "kinetolens.cli.export_command",
        "export_command",
        "Write TRACE's tables, or a Chrome/Perfetto trace annotated with kinetolens' attribution.",
    ),
    "check": Entry(
        "kinetolens.cli.check_command",
        "check_command",
        "Check that every result of TRACE (or each rank of RUNDIR) keeps the invariants: no negative time, shares within their whole, ...",
    ),
    "cache": Entry(
        "kinetolens.cli.cache_command",
        "cache_command",
        "The local cache of loaded traces (Arrow IPC, least recently used pruned first).",
    ),
    "critical-path": Entry(
        "kinetolens.cli.critical_path_command",
        "critical_path_command",
        "The longest dependency path through each step and what bounds it.",
    ),
    "whatif": Entry(
        "kinetolens.cli.whatif_command",
        "whatif_command",
        "Predict the step time after CHANGES, and what would bound the step then.",
    ),
}


class LazyGroup(click.Group):
    """A group whose commands are imported when they run or show their help;
    listing them (``kinetolens --help``) reads :data:`COMMANDS` only."""

    #: Whether the command that ran runs the user's code (see :attr:`Entry.user_code`).
    ran_user_code = False

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        # A command that will run loads traces: tune polars' allocator before
        # its module imports polars.  Help alone needs no polars at all.
        own_args = args[1 : args.index("--")] if "--" in args else args[1:]
        if not any(arg in ctx.help_option_names for arg in own_args):
            tune_allocator()
        name, command, rest = super().resolve_command(ctx, args)
        if name in COMMANDS and COMMANDS[name].user_code:
            self.ran_user_code = True
        return name, command, rest

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        command = getattr(importlib.import_module(entry.module), entry.attribute)
        assert isinstance(command, click.Command), entry
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = [(name, click.utils.make_default_short_help(COMMANDS[name].short_help, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kinetolens")
def cli() -> None:
    """Where the time of a PyTorch job goes, kernel by kernel."""


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="kinetolens", standalone_mode=False)
    except TraceError as exc:
        click.echo(f"kinetolens: error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except click.exceptions.Abort:
        click.echo("kinetolens: aborted", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as exc:
        # A group without its command: its help, readable, as click prints it (exit 2).
        click.echo(exc.ctx.get_help(), err=True)
        sys.exit(EXIT_BAD_INPUT)
    except click.ClickException as exc:
        # One line, like a bad file: click's usage block (three more lines
        # before the message) is what -h is for.
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} -h')" if isinstance(exc, click.UsageError) and ctx is not None else ""
        click.echo(f"kinetolens: error: {one_line(exc.format_message())}{hint}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as exc:
        # Output that cannot be written (a full disk, a terminal gone): one line, not a traceback.
        where = f" ({exc.filename})" if exc.filename else ""
        click.echo(f"kinetolens: error: {exc.strerror or exc}{where}", err=True)
        sys.exit(1)
    except MemoryError:
        click.echo("kinetolens: error: out of memory", err=True)
        sys.exit(1)


def run() -> None:
    """The installed ``kinetolens`` command: :func:`main`, then the process ends
    without tearing the interpreter down.  Freeing every module, table and
    object one by one took about 6% of a summary's CPU time, for nothing: the
    operating system takes the memory back at once.  The usual exit where the
    user's code ran in this process (its exit handlers) or a thread is still
    running (the usual exit waits for it)."""
    try:
        main()
        code: int | str | None = 0
    except SystemExit as exc:
        code = exc.code
    if cli.ran_user_code or threading.active_count() > 1:
        sys.exit(code)
    if isinstance(code, str):  # as the interpreter does: the message, status 1
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:  # the reader closed the pipe (| head): nothing more can reach it
            pass
        except (OSError, ValueError):
            # output lost (a full disk, a closed stream): as the interpreter's own exit, status 120
            code = code or 120
    if "logging" in sys.modules:
        sys.modules["logging"].shutdown()
    os._exit(code or 0)


if __name__ == "__main__":
    run()
