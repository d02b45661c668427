"""How the installed command ends its process (``cli.main.run``).

An analysis command ends without tearing the interpreter down, its output
complete; a command that runs the user's code (``run``, ``demo``) ends the
usual way, so that exit handlers run.  A probe registers an exit handler
before the command runs: whether it ran says which way the process ended.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kinetolens.cli.main import COMMANDS
from tests.conftest import trace_path

SRC = str(Path(__file__).resolve().parents[2] / "src")
SMALL = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"

PROBE = """
import atexit, sys
atexit.register(lambda: print("exit handlers ran", file=sys.stderr))
sys.argv = ["kinetolens", *sys.argv[1:]]
from kinetolens.cli.main import run
run()
"""


def _end(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": "100", "KINETOLENS_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=300)


def test_an_analysis_ends_without_teardown_and_its_output_whole(tmp_path: Path) -> None:
    trace = trace_path(SMALL)
    done = _end("summary", str(trace), cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "exit handlers ran" not in done.stderr
    # Everything the command printed reached the pipe: the same text as the
    # in-process command writes (the last section included).
    from click.testing import CliRunner

    from kinetolens.cli.main import cli

    same = CliRunner().invoke(cli, ["summary", str(trace)], env={"COLUMNS": "100", "KINETOLENS_CACHE_DIR": str(tmp_path)}, terminal_width=100)
    assert same.exit_code == 0
    assert done.stdout.splitlines()[-3:] == same.output.splitlines()[-3:]
    assert len(done.stdout) == len(same.output)


def test_bad_input_still_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    done = _end("summary", str(bad), cache=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and str(bad) in done.stderr


@pytest.mark.parametrize("command", sorted(c for c, entry in COMMANDS.items() if entry.user_code))
def test_a_command_that_runs_user_code_ends_the_usual_way(command: str, tmp_path: Path) -> None:
    assert command in ("run", "demo")
    if command == "demo":
        pytest.importorskip("torch")
        # a demo too short to train anything, analysis off: only how it ends matters here
        args = ["demo", "--logdir", str(tmp_path / "logs"), "--steps", "1", "--warmup", "0", "--no-analysis", "--device", "cpu"]
    else:
        args = ["run", "--logdir", str(tmp_path / "logs"), "--", sys.executable, "-c", "print('hello')"]
    done = _end(*args, cache=tmp_path)
    assert "exit handlers ran" in done.stderr, done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux) to make writing fail")
@pytest.mark.parametrize("args", [["summary"], ["summary", "--json"], ["ops"]])
def test_output_that_cannot_be_written_ends_with_one_line(args: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": "100", "KINETOLENS_CACHE_DIR": str(tmp_path)}
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, *args, str(trace_path(SMALL))], stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=300
        )
    assert done.returncode == 1
    assert done.stderr == "kinetolens: error: No space left on device\n"


def test_python_dash_m_kinetolens_is_the_command(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": "100", "KINETOLENS_CACHE_DIR": str(tmp_path)}
    from kinetolens import __version__

    version = subprocess.run([sys.executable, "-m", "kinetolens", "--version"], capture_output=True, text=True, env=env, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"kinetolens, version {__version__}"
    bad = subprocess.run([sys.executable, "-m", "kinetolens", "summary", str(tmp_path / "none.json")], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "none.json" in bad.stderr


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path: Path) -> None:
    # `kinetolens kernels T | head -1`: the terminal table (rich) as the JSON and CSV outputs, status 0, nothing on stderr
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": "100", "KINETOLENS_CACHE_DIR": str(tmp_path)}
    for args in (["kernels"], ["kernels", "--csv"]):
        proc = subprocess.Popen([sys.executable, "-c", PROBE, *args, str(trace_path(SMALL))], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()  # far more than a pipe holds is still to come
        err = proc.stderr.read()
        assert proc.wait(timeout=300) == 0, (args, err)
        assert first and err == b"", args
