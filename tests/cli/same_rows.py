"""Tables read a step window at a time against the same tables read whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kinetolens.cli.main import cli


def invoked(command: str, path: Path, *options: str) -> tuple[int, str, str]:
    """``kinetolens COMMAND PATH --no-cache OPTIONS`` in this process: exit status, stdout, stderr."""
    result = CliRunner().invoke(cli, [command, str(path), "--no-cache", *options], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def json_rows(command: str, path: Path, *options: str) -> list[dict]:
    """The command's ``--json`` rows (it must succeed)."""
    code, out, err = invoked(command, path, "--json", *options)
    assert code == 0, err
    return json.loads(out)


def same_rows(got: list[dict], want: list[dict], key: tuple[str, ...], ordered: bool = False) -> None:
    """The same rows by ``key`` (in the same order with ``ordered``), each with
    the same values: sums to 1e-9, as windows add them in another order
    (rows ranked by a sum may then swap places where they nearly tie)."""
    keyed = lambda r: tuple(r[k] for k in key)  # noqa: E731
    if ordered:
        assert [keyed(r) for r in got] == [keyed(r) for r in want]
    assert sorted(map(keyed, got)) == sorted(map(keyed, want)) and len(want) > 1
    by_key = {keyed(r): r for r in want}
    for row in got:
        expected = by_key[keyed(row)]
        assert row.keys() == expected.keys()
        for k, v in row.items():
            if isinstance(v, float):
                assert v == pytest.approx(expected[k], rel=1e-9, abs=1e-9), (keyed(row), k)
            else:
                assert v == expected[k], (keyed(row), k)
