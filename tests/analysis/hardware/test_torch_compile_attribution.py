"""torch.compile's generated kernels name the source ops and modules they
fuse, with FLOPs and bytes summed over those ops.

A tiny model is compiled (inductor, C++ kernels on the CPU) inside
``kinetolens.profile`` in its own interpreter (compiling leaves global
dynamo state behind), once per test session (``conftest.compiled``); the shared Triton trace (MI300X)
checks the name-only path against TraceLens' report.
"""

from __future__ import annotations

import ast
import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import polars as pl
from click.testing import CliRunner

import kinetolens
from kinetolens.analysis.hardware.compiled_kernels import compiled_kernel_table, generated_kernels
from kinetolens.analysis.workload.fusions import recorded
from kinetolens.analysis.hardware.kernels import kernel_table
from kinetolens.analysis.hardware.roofline import kernel_roofline
from kinetolens.analysis.workload.work import op_work
from kinetolens.cli.main import cli
from kinetolens.registry.flops import OpArgs, evaluate
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.registry.inductor_names import parse
from tests.compiled_model import ROOT_MODULE, SCRIPT_NAME, line_of

SHARED = Path(__file__).resolve().parents[3] / ".." / "shared"
TRITON_TRACE = SHARED / "traces" / "tracelens" / "torch_compile_triton" / "trace.json.gz"
TRITON_GOLDEN = (
    SHARED / "golden" / "tracelens" / "torch_compile_triton" / "trace_perf_report_csvs" / "unified_perf_summary.csv"
)

def _kernel(calls: pl.DataFrame, contains: str, direction: str) -> dict[str, Any]:
    rows = calls.filter(pl.col("name").str.contains(contains) & (pl.col("direction") == direction))
    assert rows.height == 1, rows
    return rows.row(0, named=True)


def test_generated_kernels_name_their_source_ops_and_modules(compiled: tuple[Any, dict[str, Any], Path]) -> None:
    # a compiled CPU model whose generated kernels
    # name their fused source ops and modules
    trace, _, _ = compiled
    calls = generated_kernels(trace)
    assert set(calls["backend"]) == {"cpp"} and set(calls["provenance"]) == {"inductor"}
    # Block.forward: relu(lin(x)) * 2 + 1 fused into one C++ kernel, in module "block"
    block = _kernel(calls, "relu", "fprop")
    assert {"aten::relu", "aten::mul", "aten::add"} <= set(block["fused_ops"])
    assert block["modules"] == ["block"]
    assert block["source"] == f"{SCRIPT_NAME}:{line_of('BLOCK')}"
    assert block["compiled_module"] == ROOT_MODULE  # the profiler's module: the compiled one
    # the forward softmax runs in Net.forward itself: no submodule
    softmax = _kernel(calls, "_softmax_1", "fprop")
    assert softmax["fused_ops"] == ["aten::_softmax"] and softmax["modules"] == []
    # backward: the bias gradient of block.lin is its own reduction kernel
    bias = _kernel(calls, r"cpp_fused_sum_\d+$", "bprop")
    assert bias["fused_ops"] == ["aten::sum"] and bias["modules"] == ["block.lin"]
    # the relu backward kernel also sums the head's bias gradient: two modules
    both = _kernel(calls, "threshold_backward", "bprop")
    assert set(both["modules"]) == {"head", "block"}


def test_fused_flops_are_the_sum_of_the_fused_ops(compiled: tuple[Any, dict[str, Any], Path]) -> None:
    # FLOPs and bytes of a fused region = the sum of its ops'
    trace, _, _ = compiled
    calls = generated_kernels(trace)
    block = _kernel(calls, "relu", "fprop")
    (record,) = recorded(trace)[f"graph_0_{block['name']}"]
    works = [evaluate(OpArgs(n["op"], n["dims"], n["types"], n["concrete"])) for n in record["ops"]]
    assert all(w is not None for w in works)
    assert block["flops"] == sum(w.flops for w in works)  # type: ignore[union-attr]
    assert block["bytes"] == sum(w.bytes for w in works)  # type: ignore[union-attr,misc]
    # relu, mul, add and the saved relu mask (le) over the (8, 32) activation: 1 FLOP per element each
    assert block["flops"] == 4 * 8 * 32
    # the same work is carried by the kernel's op, so ops, modules and roofline see it
    carried = op_work(trace).filter(pl.col("op_id") == block["op_id"])
    assert carried["flops"].to_list() == [block["flops"]]


def test_profile_names_cpp_kernels_and_restores_graph_cache(compiled: tuple[Any, dict[str, Any], Path]) -> None:
    # kinetolens.profile records the kernels without
    # TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE, and gives inductor its FX graph cache back
    trace, after, _ = compiled
    names = trace.ops.filter(pl.col("name").str.starts_with("graph_0_cpp_fused_"))["name"].unique().to_list()
    assert len(names) == 5
    assert set(names) <= set(recorded(trace))
    assert after == {"fx_graph_cache": True}


def test_compiled_command_shows_fused_ops_and_modules(compiled: tuple[Any, dict[str, Any], Path]) -> None:
    # `kinetolens compiled` reads at 80 and 120 columns
    trace, _, path = compiled
    table = compiled_kernel_table(trace)
    assert table.filter(pl.col("modules") == "block.lin")["fused_ops"].to_list() == ["sum"]
    for width in (80, 120):
        out = CliRunner().invoke(cli, ["compiled", str(path), "-w", str(width)])
        assert out.exit_code == 0, out.output
        assert all(len(line) <= width for line in out.output.splitlines())
        assert "block.lin" in out.output and "threshold_backward" in out.output


def _tracelens_fused_ops() -> dict[str, list[str]]:
    out = {}
    with TRITON_GOLDEN.open() as fh:
        for row in csv.DictReader(fh):
            if row["op category"] == "triton":
                params = ast.literal_eval(row["perf_params"])
                out[row["name"]] = [op.strip().replace("aten.", "aten::") for op in params["fused_ops"].split(",")]
    return out


def test_triton_kernels_named_by_their_fused_ops_like_tracelens() -> None:
    # the shared Triton trace, name only: the fused ops
    # equal TraceLens' perf_params fused_ops for every Triton kernel
    trace = kinetolens.load(TRITON_TRACE, cache=False)
    calls = generated_kernels(trace)
    golden = _tracelens_fused_ops()
    assert len(golden) == 4
    ours = {row["name"]: row["fused_ops"] for row in calls.iter_rows(named=True)}
    assert ours == golden
    assert set(calls["provenance"]) == {"name"} and set(calls["backend"]) == {"triton"}
    # attributed to the op launching each kernel (inductor's launch op of the same name)
    launch = trace.ops.select("op_id", "name")
    joined = calls.join(launch, on="op_id", how="left", suffix="_op")
    assert (joined["name_op"] == joined["name"]).all()
    assert kernel_table(trace).filter(pl.col("kernel") == "triton_poi_fused__unsafe_view_mul_silu_2")[
        "fused_ops"
    ].to_list() == ["_unsafe_view, mul, silu"]


def test_triton_kernels_get_flops_bytes_and_roofline() -> None:
    # name-only FLOPs (1 per element per fused elementwise op over
    # the launch's largest argument; views none), bytes (the launch's arguments) and roofline
    trace = kinetolens.load(TRITON_TRACE, cache=False)
    calls = generated_kernels(trace).sort("name")
    add = calls.filter(pl.col("name") == "triton_poi_fused__unsafe_view_add_3").row(0, named=True)
    numel = 8 * 4096 * 2048
    # TraceLens reports 0.067108864 GFLOPS for this kernel too (one add per element)
    assert add["flops"] == numel
    # three bf16 tensor arguments, each read or written once; TraceLens counts
    # 512 MB, the in/out buffer twice, which the launch's arguments do not tell apart
    assert add["bytes"] == 3 * numel * 2
    silu = calls.filter(pl.col("name") == "triton_poi_fused__unsafe_view_mul_silu_2").row(0, named=True)
    # mul and silu, 1 FLOP per element each (TraceLens weights silu higher: 5 per element in all)
    assert silu["flops"] == 2 * 8 * 4096 * 8192
    roof = kernel_roofline(trace, gpu_spec(trace)).filter(pl.col("name").str.starts_with("triton_"))
    assert roof.height == 4 and roof["pct_of_roof"].is_not_null().all()
    assert set(roof["bound"]) == {"memory"}


@pytest.mark.parametrize(
    ("name", "ops"),
    [
        ("graph_0_cpp_fused_add_mul_native_layer_norm_native_layer_norm_backward_relu_1",
         ["add", "mul", "native_layer_norm", "native_layer_norm_backward", "relu"]),
        ("cpp_fused__softmax_backward_data_0", ["_softmax_backward_data"]),
        ("triton_per_fused__native_batch_norm_legit_functional_0", ["_native_batch_norm_legit_functional"]),
        ("triton_tem_fused_addmm_relu_0", ["addmm", "relu"]),
        ("triton_red_fused_sum_threshold_backward_4", ["sum", "threshold_backward"]),
    ],
)  # fmt: skip
def test_kernel_names_split_into_aten_ops(name: str, ops: list[str]) -> None:
    # op names with underscores are kept whole
    parsed = parse(name)
    assert parsed is not None and list(parsed.ops) == [f"aten::{op}" for op in ops]


def test_other_kernel_names_are_not_generated() -> None:
    others = ("aten::mm", "Cijk_Alik_Bljk_BBS_BH", "triton_kernel", "void at::native::vectorized_elementwise_kernel")
    for name in others:
        assert parse(name) is None


def test_kinetolens_run_watches_inductor_from_the_start(tmp_path: Path) -> None:
    # `kinetolens run` arms the recorder at interpreter start,
    # before the script imports torch or compiles anything
    code = (
        "import json, os, sys\n"
        "os.environ['KINETOLENS_RUN_CONFIG'] = json.dumps({'logdir': sys.argv[1]})\n"
        "from kinetolens.capture.runner import bootstrap\n"
        "bootstrap()\n"
        "import torch._inductor.config as c\n"
        "import torch._inductor.codegen.cpp as cpp\n"
        "print(json.dumps([c.fx_graph_cache, c.cpp.enable_kernel_profile,"
        " hasattr(cpp.CppScheduling.codegen_comment, '_kinetolens_provenance')]))\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout.strip().splitlines()[-1]) == [False, True, True]
