"""``kinetolens cache info|clear``: the local cache of loaded traces."""

from __future__ import annotations

from pathlib import Path

import click

from kinetolens.registry.words import counted


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


_DIR = click.option(
    "--dir",
    "cache_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The cache directory (default: $KINETOLENS_CACHE_DIR, else ~/.cache/kinetolens).",
)


@click.group("cache")
def cache_command() -> None:
    """The local cache of loaded traces (Arrow IPC, least recently used pruned first)."""


@cache_command.command("info")
@_DIR
def info_command(cache_dir: Path | None) -> None:
    """Where the cache is, its entries and size, and its limit."""
    from kinetolens.cache import ENV_MAX_SIZE, cache_entries, default_cache_dir, max_cache_bytes

    where = cache_dir or default_cache_dir()
    entries = cache_entries(where, pending=True)
    done = [e for e in entries if e.complete]
    writing = [e for e in entries if not e.complete]
    click.echo(f"cache: {where}")
    click.echo(f"entries: {len(done)}, {_size(sum(e.bytes for e in done))}")
    if writing:
        click.echo(f"being written (or left by a writer that died): {len(writing)}, {_size(sum(e.bytes for e in writing))}")
    click.echo(f"limit: {_size(max_cache_bytes())} (${ENV_MAX_SIZE})")


@cache_command.command("clear")
@_DIR
def clear_command(cache_dir: Path | None) -> None:
    """Remove every entry of the cache (only the entries kinetolens wrote:
    anything else in the folder is left alone).  Exit status 1 when some
    entry could not be removed."""
    from kinetolens.cache import clear, default_cache_dir

    where = cache_dir or default_cache_dir()
    result = clear(where)
    removed = result.removed
    click.echo(f"removed {counted(len(removed), 'entry', 'entries')} ({_size(sum(e.bytes for e in removed))}) from {where}")
    if result.failed:
        reasons = sorted({why for _, why in result.failed})
        click.echo(
            f"could not remove {counted(len(result.failed), 'entry', 'entries')} "
            f"({_size(sum(e.bytes for e, _ in result.failed))}): " + "; ".join(reasons),
            err=True,
        )
        raise SystemExit(1)
