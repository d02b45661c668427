"""``kinetolens serve``: the web dashboard over a logdir of runs."""

from __future__ import annotations

import socket
from pathlib import Path

import click

from kinetolens.cli.load_options import TraceLoading, trace_load_options

LOOPBACK = "127.0.0.1"


@click.command("serve")
@click.option("--logdir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory of runs (torch-tb-profiler's layout: LOGDIR/RUN/WORKER*.pt.trace.json[.gz]).")
@click.option("--host", default=LOOPBACK, show_default=True,
              help="Address to bind. The default serves this machine only; other addresses expose your traces.")
@click.option("--port", default=6006, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free port).")
@trace_load_options()
@click.option("--keep", default=6, show_default=True, type=click.IntRange(2, 1000),
              help="Loaded traces kept in memory (a diff holds two).")
def serve_command(logdir: Path, host: str, port: int, loading: TraceLoading, keep: int) -> None:
    """Browse the runs under LOGDIR in a web browser: overview, operators, kernels,
    modules, roofline, memory, distributed, diff and timeline views.

    New runs written into LOGDIR appear without a restart.
    """
    import uvicorn

    from kinetolens.views.dashboard import create_app
    from kinetolens.views.dashboard.hosts import bound_name, is_loopback

    if not logdir.is_dir():
        raise click.BadParameter(f"{logdir} is not a directory", param_hint="--logdir")
    app = create_app(logdir, cache=loading.cache, keep=keep, host=host)
    if not is_loopback(bound_name(host)):
        click.echo(f"kinetolens: warning: serving on {host}: anyone who can reach it can read these traces", err=True)
    sock = listen(host, port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    # the address bound, not the one asked for: --port 0 picks a free port
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    click.echo(f"kinetolens dashboard: http://{shown}:{bound[1]}/ (logdir {logdir}; Ctrl+C stops)", err=True)
    server.run(sockets=[sock])


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (IPv4 or IPv6, as the name resolves), for uvicorn to serve on."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]  # fmt: skip
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)  # connections made once the address is printed wait for the server
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock
