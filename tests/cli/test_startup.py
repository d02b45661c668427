"""What ``kinetolens --help`` and a command's ``--help`` import, in fresh interpreters.

The command list comes from a static table (``cli.main.COMMANDS``), so the
group's help imports no command module, and with them neither polars,
msgspec, plotly nor rich's console; a command module is imported when that
command runs or shows its own help.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from kinetolens.cli.main import COMMANDS, cli

SRC = str(Path(__file__).resolve().parents[2] / "src")
HEAVY = ("polars", "msgspec", "plotly", "numpy", "rich.console", "rich.table", "kinetolens.loader", "kinetolens.model")

PROBE = """
import contextlib, io, json, sys
from kinetolens.cli.main import main
out = io.StringIO()
code = 0
with contextlib.redirect_stdout(out):
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({
    "code": code,
    "help": out.getvalue(),
    "loaded": sorted(m for m in sys.modules if m in HEAVY or m.startswith("kinetolens.cli.") and m.endswith("_command")
                    or m.startswith("kinetolens.cli.") and m.endswith(("_commands", "_output"))),
}))
"""


def _probe(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": "80"}
    code = f"HEAVY = {HEAVY!r}\n" + PROBE
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def test_group_help_lists_every_command_and_imports_none_of_them() -> None:
    result = _probe("--help")
    assert result["code"] == 0
    assert result["loaded"] == []  # no polars, msgspec, plotly, rich console, nor any command module
    listed = [line.split()[0] for line in result["help"].split("Commands:\n", 1)[1].splitlines() if line.strip()]
    assert listed == sorted(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_command_help_imports_only_its_own_module(command: str) -> None:
    result = _probe(command, "--help")
    assert result["code"] == 0 and result["help"].startswith(f"Usage: kinetolens {command} ")
    assert [m for m in result["loaded"] if m in HEAVY] == []
    assert [m for m in result["loaded"] if m.endswith("_output")] == []  # a command's views load when it runs
    assert [m for m in result["loaded"] if m.startswith("kinetolens.cli.")] == [COMMANDS[command].module]


def test_every_table_entry_is_a_command() -> None:
    ctx = click.Context(cli)
    for name, entry in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command), name
        assert command.callback is not None or isinstance(command, click.Group), name
    assert cli.get_command(ctx, "no-such-command") is None


#: What only computing a summary needs: its analyses, the what-if and the graph
#: library under it, and the readers, the model and polars (with numpy) under them.
ANALYSES = (
    "kinetolens.analysis.summary", "kinetolens.analysis.advice.recommendations", "kinetolens.analysis.paths.whatif", "rustworkx",
    "kinetolens.loader", "kinetolens.ingest.read", "kinetolens.model.build", "kinetolens.model.trace", "polars", "numpy",
)  # fmt: skip

CACHED_PROBE = """
import contextlib, io, json, sys
from kinetolens.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    main(sys.argv[1:])
print(json.dumps(sorted(m for m in sys.modules if m in ANALYSES)))
"""


def test_a_cached_summary_imports_none_of_the_analyses_nor_polars(tmp_path: Path) -> None:
    from tests.conftest import trace_path

    trace = str(trace_path("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"))
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": "80", "KINETOLENS_CACHE_DIR": str(tmp_path / "cache")}
    code = f"ANALYSES = {ANALYSES!r}\n" + CACHED_PROBE

    def loaded(*options: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", code, "summary", *options, trace], capture_output=True, text=True, env=env, check=True)
        return json.loads(out.stdout)

    assert loaded() == sorted(ANALYSES)  # the first run computes the summary
    assert loaded() == []  # the second reads it back: none of them is imported
    assert loaded("--json") == []


#: What a summary of a trace read whole, of a training job, has no use for: the
#: windowed readers (a trace too large to hold), the executors of many ranks, an
#: inference trace's tables, the memory flow drawing.
UNNEEDED = ("kinetolens.runs.windowed_read", "kinetolens.windowed", "kinetolens.ingest.spill", "kinetolens.runs.executors", "kinetolens.runs.summaries", "kinetolens.cli.phases_output", "kinetolens.views.memory_flow_svg", "multiprocessing")


def test_a_summary_read_whole_imports_only_what_it_shows(tmp_path: Path) -> None:
    from tests.conftest import trace_path

    trace = str(trace_path("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"))
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": "80", "KINETOLENS_CACHE_DIR": str(tmp_path / "cache")}
    code = f"ANALYSES = {UNNEEDED!r}\n" + CACHED_PROBE
    out = subprocess.run([sys.executable, "-c", code, "summary", "--no-cache", trace], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout) == []
    # the same probe sees them where they are used: the windowed read of the same file
    out = subprocess.run([sys.executable, "-c", code, "summary", "--no-cache", "--windows", trace], capture_output=True, text=True, env=env, check=True)
    assert {"kinetolens.runs.windowed_read", "kinetolens.windowed", "kinetolens.ingest.spill"} <= set(json.loads(out.stdout))
