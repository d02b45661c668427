"""``kinetolens serve``: the web dashboard over a logdir of runs."""

from __future__ import annotations

from pathlib import Path

import click

LOOPBACK = "127.0.0.1"


@click.command("serve")
@click.option("--logdir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory of runs (torch-tb-profiler's layout: LOGDIR/RUN/WORKER*.pt.trace.json[.gz]).")
@click.option("--host", default=LOOPBACK, show_default=True,
              help="Address to bind. The default serves this machine only; other addresses expose your traces.")
@click.option("--port", default=6006, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free port).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the Parquet cache.")
@click.option("--keep", default=6, show_default=True, type=click.IntRange(1, 1000), help="Loaded traces kept in memory.")
def serve_command(logdir: Path, host: str, port: int, no_cache: bool, keep: int) -> None:
    """Browse the runs under LOGDIR in a web browser: overview, operators, kernels,
    modules, roofline, memory, distributed, diff and timeline views.

    New runs written into LOGDIR appear without a restart.
    """
    import uvicorn

    from kinetolens.views.dashboard import create_app

    if not logdir.is_dir():
        raise click.BadParameter(f"{logdir} is not a directory", param_hint="--logdir")
    app = create_app(logdir, cache=not no_cache, keep=keep)
    if host != LOOPBACK and host != "localhost":
        click.echo(f"kinetolens: warning: serving on {host}: anyone who can reach it can read these traces", err=True)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    click.echo(f"kinetolens dashboard: http://{host}:{port}/ (logdir {logdir}; Ctrl+C stops)", err=True)
    server.run()
