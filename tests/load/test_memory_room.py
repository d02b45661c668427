"""A trace read whole that cannot fit in memory stops at once with one line, not an out-of-memory kill.

A Kineto file read whole takes about its own size in memory; one larger
than the memory the process may take would be killed by the kernel long
after the reading began, with no word.  :mod:`kinetolens.memory_room`
checks first (files from 1 GB of JSON; the cache of a trace
already read is not checked) and says what does fit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import kinetolens
import kinetolens.memory_room as memory_room
from kinetolens.cli.main import main
from kinetolens.errors import TraceError
from kinetolens.ingest.kineto_parallel import estimated_json_bytes
from tests.conftest import trace_path

TRACE = trace_path("hta/trace_diff/control/control.json.gz")  # 35 MB of JSON


def test_a_file_that_does_not_fit_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_room, "CHECKED_FROM_BYTES", 1)
    need = memory_room.needed_bytes(estimated_json_bytes(TRACE))
    with pytest.raises(TraceError) as caught:
        memory_room.check_room(TRACE, free=need - 200_000_000)
    line = str(caught.value)
    assert "\n" not in line and line.startswith(str(TRACE))
    assert f"needs about {need / 1e9:.1f} GB of memory and {(need - 200_000_000) / 1e9:.1f} GB is free" in line
    memory_room.check_room(TRACE, free=need + 1)  # fits: no error
    monkeypatch.setenv("KINETOLENS_NO_MEMORY_CHECK", "1")
    memory_room.check_room(TRACE, free=0)


def test_small_files_are_not_checked() -> None:
    memory_room.check_room(TRACE, free=0)  # 35 MB: under CHECKED_FROM_BYTES


def test_free_memory_is_the_least_of_the_machine_and_the_cgroup(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemAvailable:   20000000 kB\n")
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    assert memory_room.free_bytes(str(meminfo), str(cgroup)) == 20_000_000 * 1024  # no cgroup limit file
    (cgroup / "memory.max").write_text("8000000000\n")
    (cgroup / "memory.current").write_text("3000000000\n")
    assert memory_room.free_bytes(str(meminfo), str(cgroup)) == 5_000_000_000
    (cgroup / "memory.max").write_text("max\n")
    assert memory_room.free_bytes(str(meminfo), str(cgroup)) == 20_000_000 * 1024
    assert memory_room.free_bytes(str(tmp_path / "none"), str(tmp_path / "none")) is None
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("6000000000\n")
    (v1 / "memory" / "memory.usage_in_bytes").write_text("2000000000\n")
    assert memory_room.free_bytes(str(meminfo), str(v1)) == 4_000_000_000
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    assert memory_room.free_bytes(str(meminfo), str(v1)) == 20_000_000 * 1024


def test_the_cli_exits_2_with_the_line_and_a_cached_trace_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    kinetolens.load(TRACE, cache=cache)  # read once, while it fits
    monkeypatch.setattr(memory_room, "CHECKED_FROM_BYTES", 1)
    monkeypatch.setattr(memory_room, "BASE_BYTES", 10**18)  # more than any machine has
    with pytest.raises(SystemExit) as exited:
        main(["ops", "--no-cache", str(TRACE)])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"kinetolens: error: {TRACE}: reading its") and "step window" in line
    # The cache of a trace already read takes far less: it is not checked.
    assert kinetolens.load(TRACE, cache=cache).kernels.height > 0
