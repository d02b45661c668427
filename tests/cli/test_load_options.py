"""Every command that loads a trace takes the same load options, which do what they say."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from kinetolens.cli.main import COMMANDS, cli
from tests.conftest import trace_path

SRC = str(Path(__file__).resolve().parents[2] / "src")
#: Commands that load no trace of their own.
NO_TRACE = {"demo", "run", "cache", "hang"}
#: Commands whose tables pair CUDA/HIP graph replays with their capture trace.
WITH_CAPTURE = {"summary", "kernels", "ops", "modules", "phases", "compiled", "report", "roofline"}


def test_every_trace_command_has_the_same_load_options() -> None:
    ctx = click.Context(cli)
    for name in sorted(set(COMMANDS) - NO_TRACE):
        command = cli.get_command(ctx, name)
        assert command is not None
        params = {p.name: p for p in command.params}
        assert params["no_cache"].help == "Neither read nor write the cache.", name
        assert ("capture" in params) == (name in WITH_CAPTURE), name


def test_no_cache_neither_reads_nor_writes_the_cache(tmp_path: Path) -> None:
    trace = str(trace_path("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"))
    env = {**os.environ, "PYTHONPATH": SRC, "KINETOLENS_CACHE_DIR": str(tmp_path / "cache")}

    def summary(*extra: str) -> None:
        cmd = [sys.executable, "-m", "kinetolens.cli.main", "summary", trace, "--json", *extra]
        subprocess.run(cmd, env=env, check=True, capture_output=True)

    summary("--no-cache")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    summary()
    assert any((tmp_path / "cache").iterdir())
