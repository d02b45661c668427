"""The ``kinetolens`` command.  Bad input ends with one line and exit 2."""

from __future__ import annotations

import sys

from kinetolens._allocator import tune_allocator

tune_allocator()  # the command's own process: before any command module imports polars

import click  # noqa: E402

from kinetolens import __version__  # noqa: E402
from kinetolens.cli.analysis_commands import (
    kernels_command,
    ops_command,
    summary_command,
)
from kinetolens.cli.cache_command import cache_command
from kinetolens.cli.capture_commands import demo_command, run_command
from kinetolens.cli.check_command import check_command
from kinetolens.cli.checks import one_line
from kinetolens.cli.compiled_command import compiled_command
from kinetolens.cli.counters_command import counters_command
from kinetolens.cli.critical_path_command import critical_path_command
from kinetolens.cli.diff_command import diff_command
from kinetolens.cli.dist_command import dist_command
from kinetolens.cli.export_command import export_command
from kinetolens.cli.gpu_time_commands import idle_command, launches_command
from kinetolens.cli.memory_command import memory_command
from kinetolens.cli.modules_command import modules_command
from kinetolens.cli.phases_command import phases_command
from kinetolens.cli.report_command import report_command
from kinetolens.cli.roofline_command import roofline_command
from kinetolens.cli.serve_command import serve_command
from kinetolens.cli.whatif_command import whatif_command
from kinetolens.errors import TraceError

EXIT_BAD_INPUT = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kinetolens")
def cli() -> None:
    """Where the time of a PyTorch job goes, kernel by kernel."""


cli.add_command(summary_command, "summary")
cli.add_command(kernels_command, "kernels")
cli.add_command(ops_command, "ops")
cli.add_command(modules_command, "modules")
cli.add_command(phases_command, "phases")
cli.add_command(compiled_command, "compiled")
cli.add_command(demo_command, "demo")
cli.add_command(run_command, "run")
cli.add_command(memory_command, "memory")
cli.add_command(counters_command, "counters")
cli.add_command(idle_command, "idle")
cli.add_command(launches_command, "launches")
cli.add_command(roofline_command, "roofline")
cli.add_command(dist_command, "dist")
cli.add_command(serve_command, "serve")
cli.add_command(diff_command, "diff")
cli.add_command(report_command, "report")
cli.add_command(export_command, "export")
cli.add_command(cache_command, "cache")
cli.add_command(critical_path_command, "critical-path")
cli.add_command(whatif_command, "whatif")
cli.add_command(check_command, "check")


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="kinetolens", standalone_mode=False)
    except TraceError as exc:
        click.echo(f"kinetolens: error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except click.exceptions.Abort:
        click.echo("kinetolens: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        # One line, like a bad file: click's usage block (three more lines
        # before the message) is what -h is for.
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} -h')" if isinstance(exc, click.UsageError) and ctx is not None else ""
        click.echo(f"kinetolens: error: {one_line(exc.format_message())}{hint}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except BrokenPipeError:
        sys.exit(0)
    except MemoryError:
        click.echo("kinetolens: error: out of memory", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
