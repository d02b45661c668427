"""torch.compile's generated kernels are split by the submodule they fuse:
the model puts each kernel in the deepest module common to its fused nodes,
so ``modules``, ``ops --aggregate-by module`` and the report agree on
compiled time by submodule.

Reads the compiled CPU model of ``tests/compiled_model.py``, compiled once
per session by ``conftest.compiled``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from kinetolens.analysis.hardware.compiled_kernels import generated_kernels
from kinetolens.analysis.hardware.module_tree import module_tree
from kinetolens.analysis.workload.ops import op_stats
from kinetolens.cli.main import cli
from kinetolens.model.trace import Trace
from tests.compiled_model import ROOT_MODULE

BLOCK = f"{ROOT_MODULE}.block"
LIN = f"{ROOT_MODULE}.block.lin"


def _call(calls: pl.DataFrame, contains: str, direction: str) -> dict[str, Any]:
    rows = calls.filter(pl.col("name").str.contains(contains) & (pl.col("direction") == direction))
    assert rows.height == 1, rows
    return rows.row(0, named=True)


def _in_root(trace: Trace) -> Trace:
    """The same trace with every generated kernel's op back in the compiled
    module, as the profiler records it: what the views showed before."""
    generated = generated_kernels(trace).select("op_id", "compiled_module").unique()
    ops = trace.ops.join(generated, on="op_id", how="left", maintain_order="left")
    ops = ops.with_columns(module=pl.coalesce("compiled_module", "module")).drop("compiled_module")
    return Trace(**{**trace.__dict__, "ops": ops})


def _modules_json(path: Path) -> dict[str, dict[str, Any]]:
    out = CliRunner().invoke(cli, ["modules", str(path), "--json", "--no-cache"])
    assert out.exit_code == 0, out.output
    return {row["path"]: row for row in json.loads(out.output)}


def test_modules_command_splits_compiled_time_by_submodule(compiled: tuple[Trace, Any, Path]) -> None:
    # `kinetolens modules --json`
    # shows the compiled submodules with their kernels' time
    trace, _, path = compiled
    rows = _modules_json(path)
    calls = generated_kernels(trace)
    relu = _call(calls, "relu", "fprop")  # relu(lin(x)) * 2 + 1 in Block.forward
    bias = _call(calls, r"cpp_fused_sum_\d+$", "bprop")  # block.lin's bias gradient
    assert relu["module"] == BLOCK and bias["module"] == LIN
    assert relu["compiled_module"] == bias["compiled_module"] == ROOT_MODULE
    assert rows[BLOCK]["self_us"] == pytest.approx(relu["dur_us"])
    assert rows[BLOCK]["fwd_self_us"] == pytest.approx(relu["dur_us"])
    assert rows[LIN]["self_us"] == pytest.approx(bias["dur_us"]) and rows[LIN]["parent"] == BLOCK
    assert rows[BLOCK]["total_us"] == pytest.approx(relu["dur_us"] + bias["dur_us"])
    # the FLOPs the kernels carry go with them
    assert rows[LIN]["flops"] == bias["flops"]
    assert rows[BLOCK]["flops"] == relu["flops"] + bias["flops"]


def test_totals_unchanged_by_the_split(compiled: tuple[Trace, Any, Path]) -> None:
    # time moves from the
    # compiled root to its submodules, none is made or lost
    trace, _, _ = compiled
    before, after = module_tree(_in_root(trace)), module_tree(trace)
    assert BLOCK not in before["path"].to_list() and BLOCK in after["path"].to_list()
    for col in ("self_us", "fwd_self_us", "bwd_self_us"):
        assert after[col].sum() == pytest.approx(before[col].sum())
    was, now = (t.filter(pl.col("path") == ROOT_MODULE).row(0, named=True) for t in (before, after))
    assert now["total_us"] == pytest.approx(was["total_us"]) and now["flops"] == was["flops"]
    moved = after.filter(pl.col("path").is_in([BLOCK, LIN]))["self_us"].sum()
    assert moved > 0 and now["self_us"] == pytest.approx(was["self_us"] - moved)


def test_ops_by_module_and_report_agree(compiled: tuple[Trace, Any, Path]) -> None:
    # `ops --aggregate-by module`
    # counts a generated kernel in its submodule and takes it off the op around
    # it (the compiled graph's call), so the sums are those of the top-level ops
    trace, _, path = compiled
    calls = generated_kernels(trace)
    relu = _call(calls, "relu", "fprop")
    before, after = op_stats(_in_root(trace), by="module"), op_stats(trace, by="module")
    assert BLOCK not in before["module"].to_list()
    block = after.filter(pl.col("module") == BLOCK).row(0, named=True)
    assert block["host_total_us"] == pytest.approx(relu["dur_us"]) and block["flops"] == relu["flops"]
    for col in ("host_total_us", "device_total_us", "flops", "bytes"):
        assert after[col].sum() == pytest.approx(before[col].sum())
    # (host self is each counted op's own time: the kernel's now counts too)
    assert block["host_self_us"] == pytest.approx(relu["dur_us"])
    out = CliRunner().invoke(cli, ["ops", str(path), "--aggregate-by", "module", "--json", "--no-cache"])
    assert out.exit_code == 0, out.output
    shown = {row["module"]: row for row in json.loads(out.output)}
    assert shown[BLOCK]["host_total_us"] == pytest.approx(relu["dur_us"])
    # the report's module table and tree are the same tables
    from kinetolens.views.report_data import collect

    data = collect(trace)
    assert data.modules.filter(pl.col("module") == BLOCK)["host_total_us"].item() == pytest.approx(relu["dur_us"])
    tree = data.module_tree.filter(pl.col("path") == BLOCK)
    assert tree["self_us"].item() == pytest.approx(_modules_json(path)[BLOCK]["self_us"])


def test_kernel_spanning_two_submodules_goes_to_their_parent(compiled: tuple[Trace, Any, Path]) -> None:
    # the relu backward kernel
    # also sums the head's bias gradient: nodes of `block` and `head`, so it
    # is Net's own (their common parent), not either submodule's
    trace, _, path = compiled
    both = _call(generated_kernels(trace), "threshold_backward", "bprop")
    assert set(both["modules"]) == {"head", "block"}
    assert both["module"] == ROOT_MODULE
    assert f"{ROOT_MODULE}.head" not in _modules_json(path)


@pytest.mark.parametrize(
    ("paths", "common"),
    [
        (["block.lin", "block.act"], "block"),  # siblings: their parent
        (["block.lin", "block"], "block"),  # a module and its child: the module
        (["block.lin", "block.linear"], "block"),  # by path segment, not by text
        (["head", "block"], ""),  # the compiled module itself
        (["block.lin", ""], ""),
        (["layers.0.attn.q", "layers.0.attn.k", "layers.0.attn"], "layers.0.attn"),
        ([], None),
    ],
)
def test_common_module_is_the_deepest_shared_path(paths: list[str], common: str | None) -> None:
    # the rule that places a kernel
    from kinetolens.model.compiled_modules import common_module

    assert common_module(paths) == common
