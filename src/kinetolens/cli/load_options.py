"""Options that choose how a command loads its trace, shared by the commands."""

from __future__ import annotations

import click

#: ``--capture PATH``: the graph capture trace a replay trace's kernels pair with.
capture_option = click.option(
    "--capture",
    type=click.Path(exists=True),
    default=None,
    help="Graph capture trace (file or folder) for a CUDA/HIP graph replay trace; "
    "default: capture_traces/ beside TRACE when it holds execution_details.json.",
)
