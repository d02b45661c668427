"""FLOP formulas: only argument problems mean "no number"; a formula bug is
a counted warning naming the op; shapes must fit; one formula per op.

"""

from __future__ import annotations

import dataclasses
import json
import random

import polars as pl
import pytest
from click.testing import CliRunner

import kinetolens.registry.flops as flops
from kinetolens.analysis.hardware.roofline import op_roofline
from kinetolens.analysis.session import warnings_of
from kinetolens.analysis.workload.work import carried_work
from kinetolens.cli.main import cli
from kinetolens.loader import load
from kinetolens.registry.flops import REGISTRY, OpArgs, compute
from kinetolens.registry.flops_base import json_list, register
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from tests.conftest import trace_path

BF, F32 = "c10::BFloat16", "float"
QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def work(name: str, dims: list, types: list, concrete: list | None = None):
    concrete = concrete if concrete is not None else [""] * len(dims)
    return compute(name, json.dumps(dims), json.dumps(types), json.dumps(concrete))


def _buggy(op: OpArgs):
    return op.tensor(0).shape * None  # a coding bug: TypeError whatever the arguments


# -- a bug is not "no FLOPs" -------------------------------------------------------------


def test_a_formula_bug_is_an_error_naming_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    # a TypeError inside a formula used to read as "no FLOPs".
    monkeypatch.setitem(REGISTRY, "aten::mm", dataclasses.replace(REGISTRY["aten::mm"], fn=_buggy))
    with pytest.raises(flops.FormulaError, match=r"aten::mm.*TypeError"):
        work("aten::mm", [[64, 32], [32, 16]], [F32, F32])


def test_an_impossible_result_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # negative FLOPs are a bug, not a number to add up.
    entry = REGISTRY["aten::mm"]
    monkeypatch.setitem(REGISTRY, "aten::mm", dataclasses.replace(entry, fn=lambda op: flops.Work(-1.0, 8.0, "bad")))
    with pytest.raises(flops.FormulaError, match="impossible"):
        work("aten::mm", [[64, 32], [32, 16]], [F32, F32])


def test_a_failing_formula_is_a_counted_warning_on_the_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    # the calls lose their own work (a composite above
    # them, aten::matmul, may then count it), and the trace says so once,
    # with the number of calls and the op's name.
    t = load(str(trace_path(QWEN)))
    mm_calls = t.ops.filter(pl.col("name") == "aten::mm").height
    before = carried_work(t).ops.join(t.ops.select("op_id", "name"), on="op_id")
    # regression pin (96 in the step + 43 of the previous iteration's tail, before the window)
    assert before.filter(pl.col("name") == "aten::mm").height == mm_calls == 139
    monkeypatch.setitem(REGISTRY, "aten::mm", dataclasses.replace(REGISTRY["aten::mm"], fn=_buggy))
    t = load(str(trace_path(QWEN)))  # a trace of its own: its analysis session computes the work afresh
    after = carried_work(t).ops.join(t.ops.select("op_id", "name"), on="op_id")
    assert after.filter(pl.col("name") == "aten::mm").height == 0
    failed = [w for w in warnings_of(t) if w.kind == "FLOP formula failed"]
    assert len(failed) == 1 and failed[0].count == mm_calls
    assert failed[0].detail.startswith("aten::mm: TypeError")
    assert not [w for w in t.warnings if w.kind == "FLOP formula failed"]  # the analysis writes nothing into the trace
    carried_work(t)  # computed once per trace: still one warning
    assert len([w for w in warnings_of(t) if w.kind == "FLOP formula failed"]) == 1


def test_roofline_cli_prints_the_formula_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    # the view that lost the rows says why.
    monkeypatch.setitem(REGISTRY, "aten::mm", dataclasses.replace(REGISTRY["aten::mm"], fn=_buggy))
    result = CliRunner().invoke(cli, ["roofline", str(trace_path(QWEN)), "--no-cache", "-w", "200"])
    assert result.exit_code == 0, result.output
    assert "warning: FLOP formula failed: aten::mm: TypeError" in result.output
    assert "(139x)" in result.output


# -- argument problems stay "no number" ----------------------------------------------------


def test_registering_an_op_twice_is_an_error() -> None:
    # a second formula silently replaced the first.
    name = "test::registered_twice"
    try:
        register(name, "elementwise")(lambda op: None)
        with pytest.raises(ValueError, match="registered_twice has a FLOP formula already"):
            register(name, "elementwise")(lambda op: None)
    finally:
        REGISTRY.pop(name, None)


@pytest.mark.parametrize(
    ("name", "dims", "types"),
    [
        # inner dimensions (and batches) must agree, as
        # torch.utils.flop_counter asserts; a misread overload is no number.
        ("aten::mm", [[64, 32], [16, 8]], [F32, F32]),
        ("aten::addmm", [[8], [64, 32], [16, 8], [], []], [F32, F32, F32, "Scalar", "Scalar"]),
        ("aten::bmm", [[3, 5, 6], [3, 7, 4]], [F32, F32]),
        ("aten::bmm", [[3, 5, 6], [2, 6, 4]], [F32, F32]),
        ("aten::baddbmm", [[3, 5, 4], [3, 5, 6], [3, 5, 4], [], []], [F32] * 3 + ["Scalar"] * 2),
        ("aten::_scaled_mm", [[64, 32], [16, 8]], ["c10::Float8_e4m3fn"] * 2),
        ("aten::matmul", [[2, 5, 6], [7, 4]], [F32, F32]),
        ("aten::linear", [[2, 7, 8], [12, 9], [12]], [F32, F32, F32]),
        ("aten::mv", [[5, 6], [7]], [F32, F32]),
        # sdpa: (B, H, L, D); K's head dim differs from Q's
        ("aten::_scaled_dot_product_flash_attention", [[2, 8, 128, 64], [2, 8, 128, 32], [2, 8, 128, 64]], [BF] * 3),
        # query heads not a multiple of key/value heads
        ("aten::_scaled_dot_product_flash_attention", [[2, 6, 128, 64], [2, 4, 128, 64], [2, 4, 128, 64]], [BF] * 3),
        # a convolution whose input channels do not fit its weight (3 vs 4)
        ("aten::convolution", [[8, 3, 32, 32], [16, 4, 3, 3], [16], [], [], [], [], [], []], [F32] * 3 + [""] * 6),
    ],
)
def test_shapes_that_do_not_fit_get_no_number(name: str, dims: list, types: list) -> None:
    concrete = [""] * len(dims)
    if name == "aten::convolution":
        concrete = ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    assert work(name, dims, types, concrete) is None


def test_shapes_that_fit_still_count() -> None:
    # The same calls with fitting shapes: the checks above are not "never".
    assert work("aten::mm", [[64, 32], [32, 8]], [F32, F32]).flops == 2 * 64 * 8 * 32
    gqa = work("aten::_scaled_dot_product_flash_attention", [[2, 8, 128, 64], [2, 4, 128, 64], [2, 4, 128, 64]],
               [BF] * 3)  # fmt: skip
    assert gqa.flops == 2 * 2 * 8 * 128 * 128 * (64 + 64)  # grouped-query: counted at the query's 8 heads
    conv = work("aten::convolution", [[8, 4, 32, 32], [16, 2, 3, 3], [16], [], [], [], [], [], []], [F32] * 3 + [""] * 6,
                ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "2"])  # fmt: skip
    assert conv.flops == 2 * 8 * 32 * 32 * 16 * 2 * 3 * 3  # groups=2


def _real_argument_sets() -> list[tuple]:
    rows = set()
    for rel in (QWEN, RESNET, "tracelens/b200/eager_trace.json.gz", "hta/trace_diff/control/control.json.gz"):
        ops = load(str(trace_path(rel))).ops
        cols = [c for c in ("name", "input_dims", "input_types", "concrete_inputs") if c in ops.columns]
        for r in ops.filter(pl.col("name").is_in(list(REGISTRY))).select(cols).unique().iter_rows():
            rows.add((*r, *[None] * (4 - len(r))))
    return sorted(rows, key=str)


def _mutate(dims: list, concrete: list, rng: random.Random) -> tuple[list, list]:
    dims, concrete = json.loads(json.dumps(dims)), list(concrete)
    for _ in range(rng.randint(1, 3)):
        if dims and rng.random() < 0.6:
            i = rng.randrange(len(dims))
            d = dims[i]
            if isinstance(d, list) and d and isinstance(d[0], int) and rng.random() < 0.5:
                d[rng.randrange(len(d))] = rng.choice([0, 1, 3, 7, 64])
            elif rng.random() < 0.5:
                dims[i] = d[:-1] if isinstance(d, list) else []
            else:
                dims.pop(i)
        elif concrete:
            concrete[rng.randrange(len(concrete))] = rng.choice(
                ["", "0", "1", "-1", "-7", "[]", "[0]", "[0, 0]", "[-2, -2]", "[1, 1]", "True", "False", "99", "1.5"]
            )
    return dims, concrete


def test_mutated_real_arguments_never_raise() -> None:
    # with errors no longer swallowed, argument problems
    # must be handled by the formulas themselves.  Real argument sets from
    # four traces, each mutated (a dimension changed or dropped, an argument
    # missing, a concrete value negative or zero): None or a valid count,
    # never a FormulaError.  (A guard for the new strictness: on the old
    # code, which swallowed everything, it passes trivially.)
    rng = random.Random(17)
    rows = _real_argument_sets()
    assert len(rows) > 1000
    by_name: dict[str, list[tuple]] = {}
    for r in rows:
        by_name.setdefault(r[0], []).append(r)
    for name, sets in sorted(by_name.items()):
        for _ in range(60):
            _, dims, types, concrete = rng.choice(sets)
            d, c = _mutate(json_list(dims), json_list(concrete), rng)
            flops.evaluate(OpArgs(name, d, json_list(types), c))  # raises FormulaError on a bug


def test_formula_checks_change_no_number_on_real_traces() -> None:
    # every real call fits its shapes, so the checks drop
    # none.  Regression pins: the Qwen trace's per-op FLOPs, the same before
    # and after the checks (every op of every stored trace was compared).
    t = load(str(trace_path(QWEN)))
    # every call's FLOPs, the previous iteration's tail before the window (named by its next iteration) too
    by = op_roofline(t, gpu_spec(t)).group_by("name").agg(pl.col("flops").sum())
    flops_by_op = dict(zip(by["name"], by["flops"]))
    assert flops_by_op["aten::mm"] == 6_053_798_346_752
    assert flops_by_op["aten::addmm"] == 1_913_206_603_776
    assert flops_by_op["aten::_scaled_dot_product_flash_attention"] == 348_138_831_872
    assert not [w for w in t.warnings if w.kind == "FLOP formula failed"]
