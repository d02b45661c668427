"""``kinetolens.nvtx``: the markers it would push to NVTX (op, module path,
shapes, dtypes, call site), built from real torch ops, and that it enters and
leaves cleanly where torch has no NVTX (this CPU build) without leaving hooks
or a dispatch mode behind."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.nn.modules import module as nn_module
from torch.utils._python_dispatch import _get_current_dispatch_mode

import kinetolens
from kinetolens.capture.nvtx import (
    describe_args,
    format_marker,
    nvtx_unavailable_reason,
    parse_marker,
)

NVTX_MISSING = nvtx_unavailable_reason()


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x: Any) -> Any:
        h = self.act(self.fc1(x))  # FC1
        return self.fc2(h)


def line_of(marker: str) -> int:
    with open(__file__, encoding="utf-8") as fh:
        return next(i for i, line in enumerate(fh, 1) if line.rstrip().endswith(f"# {marker}"))


def hook_counts() -> tuple[int, int]:
    return len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks)


def run_markers(**kwargs: Any) -> list[dict[str, Any]]:
    net = Net()
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with kinetolens.nvtx(keep_markers=True, **kwargs) as marks:
            net(x).sum().backward()
    parsed = [parse_marker(m) for m in marks.markers]
    assert all(p is not None for p in parsed)
    return parsed  # type: ignore[return-value]


def test_marker_format_round_trips() -> None:
    m = format_marker("aten::addmm", "Net.fc1", [[8], [3, 4], [4, 8]], ["float32"] * 3, "/src/train.py:41")
    assert m == (
        'kinetolens {"op":"aten::addmm","module":"Net.fc1","shapes":[[8],[3,4],[4,8]],'
        '"dtypes":["float32","float32","float32"],"site":"/src/train.py:41"}'
    )
    assert parse_marker(m) == {
        "op": "aten::addmm",
        "module": "Net.fc1",
        "shapes": [[8], [3, 4], [4, 8]],
        "dtypes": ["float32"] * 3,
        "site": "/src/train.py:41",
    }
    assert parse_marker("aten::addmm, seq = 12") is None  # emit_nvtx's own ranges
    json.loads(m.split(" ", 1)[1])


def test_describe_args_keeps_positions() -> None:
    shapes, dtypes = describe_args(
        [torch.zeros(2, 3, dtype=torch.float16), [torch.zeros(4), torch.zeros(1, dtype=torch.int64)], 2.5, None]
    )
    assert shapes == [[2, 3], [[4], [1]], None, None]
    assert dtypes == ["float16", ["float32", "int64"], None, None]


def test_markers_carry_op_module_shapes_dtypes_site() -> None:
    markers = run_markers()
    addmm = [m for m in markers if m["op"] == "aten::addmm"]
    assert [m["module"] for m in addmm] == ["Net.fc1", "Net.fc2"]
    assert addmm[0]["shapes"] == [[8], [3, 4], [4, 8]]
    assert addmm[1]["shapes"] == [[2], [3, 8], [8, 2]]
    assert addmm[0]["dtypes"] == ["float32"] * 3
    # the innermost line outside torch and kinetolens: Net.forward's call of fc1
    assert addmm[0]["site"] == f"{__file__}:{line_of('FC1')}"
    relu = next(m for m in markers if m["op"] == "aten::relu")
    assert relu["module"] == "Net.act"
    # backward ops run outside any forward: no module
    assert any(m["op"] == "aten::threshold_backward" and m["module"] is None for m in markers)


def test_switches_drop_modules_and_sites() -> None:
    markers = run_markers(with_modules=False, with_stack=False)
    assert markers and all(m["module"] is None and m["site"] is None for m in markers)
    assert any(m["op"] == "aten::addmm" for m in markers)


@pytest.mark.skipif(NVTX_MISSING is None, reason="this torch has NVTX")
def test_without_nvtx_warns_and_changes_nothing() -> None:
    before = hook_counts()
    net = Net()
    with pytest.warns(RuntimeWarning, match=r"kinetolens\.nvtx: no NVTX ranges: .*no NVTX"):
        with kinetolens.nvtx() as marks:
            assert _get_current_dispatch_mode() is None  # nothing intercepts ops
            assert hook_counts() == before
            net(torch.randn(2, 4))
    assert marks.unavailable == NVTX_MISSING and marks.markers == []


def test_leaves_no_hooks_or_mode_behind_even_on_error() -> None:
    before = hook_counts()
    net = Net()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ZeroDivisionError):
            with kinetolens.nvtx(keep_markers=True) as marks:
                assert _get_current_dispatch_mode() is not None
                assert hook_counts() == (before[0] + 1, before[1] + 1)
                net(torch.randn(2, 4))
                1 / 0  # noqa: B018
    assert hook_counts() == before
    assert _get_current_dispatch_mode() is None
    n = len(marks.markers)
    net(torch.randn(2, 4))
    assert len(marks.markers) == n > 0  # recording stopped at exit


def test_module_path_unwinds_after_a_failing_forward() -> None:
    class Boom(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            raise ValueError("boom")

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.boom = Boom()
            self.fc = torch.nn.Linear(2, 2)

        def forward(self, x: Any) -> Any:
            try:
                self.boom(x)
            except ValueError:
                pass
            return self.fc(x)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with kinetolens.nvtx(keep_markers=True) as marks:
            Outer()(torch.randn(1, 2))
    addmm = [parse_marker(m) for m in marks.markers if '"aten::addmm"' in m]
    assert [m["module"] for m in addmm] == ["Outer.fc"]  # not Outer.boom.fc


def test_cannot_enter_twice() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with kinetolens.nvtx(keep_markers=True) as marks:
            with pytest.raises(RuntimeError, match="already active"):
                marks.__enter__()
