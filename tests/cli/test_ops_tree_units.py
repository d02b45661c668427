"""``ops --tree`` in the terminal: one time unit for the whole table, and the
caption says what % step is of (the tree's is of device total, the flat table's of self time)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import trace_path
from tests.terminal import cli_text

B200 = "tracelens/b200/eager_trace.json.gz"


@pytest.mark.parametrize("columns", [80, 120])
def test_tree_has_one_time_unit_and_defines_its_share(columns: int) -> None:
    text = cli_text("ops", str(trace_path(B200)), "--tree", columns=columns)
    header = "\n".join(text.splitlines()[1:3])
    found = set(re.findall(r"\b(?:total|self) (us|ms|s)\b", header))
    assert len(found) == 1, header  # device total, device self and host total in one unit
    assert "% step: a node's device total" in " ".join(text.split())
