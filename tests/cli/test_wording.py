"""The CLI's words: help as plain text, a group's help readable, counts that agree with their nouns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner

from kinetolens.cli.main import COMMANDS, cli
from kinetolens.registry.words import counted

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _every_command_path() -> list[list[str]]:
    ctx = click.Context(cli)
    paths: list[list[str]] = [[]]
    for name in COMMANDS:
        paths.append([name])
        command = cli.get_command(ctx, name)
        if isinstance(command, click.Group):
            paths.extend([name, sub] for sub in command.list_commands(ctx))
    return paths


def test_help_is_plain_text_without_sphinx_markup() -> None:
    runner = CliRunner()
    for path in _every_command_path():
        out = runner.invoke(cli, [*path, "--help"], prog_name="kinetolens", env={"COLUMNS": "100"})
        assert out.exit_code == 0, (path, out.output)
        assert "``" not in out.output and ":func:" not in out.output, (path, out.output)


def test_group_without_its_command_prints_its_help_readably() -> None:
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "kinetolens.cli.main", "cache"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines[0] == "Usage: kinetolens cache [OPTIONS] COMMAND [ARGS]..."
    assert "Commands:" in lines and any(line.split()[:1] == ["clear"] for line in lines), proc.stderr


def test_counts_agree_with_their_nouns() -> None:
    assert counted(1, "blocking call") == "1 blocking call"
    assert counted(2, "blocking call") == "2 blocking calls"
    assert counted(0, "kernel") == "0 kernels"
    assert counted(1, "entry", "entries") == "1 entry" and counted(1200, "entry", "entries") == "1,200 entries"
