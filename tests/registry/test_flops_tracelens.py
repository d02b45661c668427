"""FLOPs and bytes on real H100 inference traces against TraceLens' perf-model CSVs.

For every GEMM, convolution and SDPA row TraceLens reports (and every
elementwise/reduce row of its unified summary), the op calls in the trace
with the same name and input shapes are found and our work under them (the
op itself and the ops it calls) is compared.  TraceLens' "MB" are MiB.

Where the numbers differ the test asserts the exact difference and why:

* addmm: TraceLens adds M*N FLOPs for the bias.  We count the product's
  2*M*N*K only, as torch.utils.flop_counter does: that is the Tensor Core
  work a GEMM's TFLOP/s is compared with (the bias add runs in the epilogue).
* flash attention bytes: the kernel also writes the log-sum-exp (fp32, one
  per query row, used by the backward pass); TraceLens leaves it out.
* mean over a dim: TraceLens writes a 1-element output; the op writes one
  per kept row (e.g. 16*559 for a [16, 559, 1024] mean over -1), we are right.
* copy_, upsample_nearest: TraceLens counts one FLOP per output element; a
  copy, a dtype conversion or a nearest-neighbour gather does no arithmetic,
  so we count none (bytes agree).
"""

from __future__ import annotations

import ast
import csv
import json
import math

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.workload.work import op_work
from kinetolens.registry.dtypes import dtype_bytes
from kinetolens.registry.flops import REGISTRY

from tests.conftest import GOLDEN, trace_path

MODELS = [
    "Falconsai_nsfw_image_detection__1016002",
    "Qwen_Qwen1.5-0.5B-Chat__1016005",
    "facebook_timesformer-base-finetuned-k400__1016002",
    "gaunernst_bert-small-uncased__1016001",
]
MIB = 2**20


def _norm_dims(text: str) -> str:
    """Kineto JSON dims or a Python tuple repr -> one canonical JSON text."""
    value = ast.literal_eval(text)

    def lists(x: object) -> object:
        return [lists(v) for v in x] if isinstance(x, (list, tuple)) else x

    return json.dumps(lists(value))


class Model:
    def __init__(self, name: str) -> None:
        trace = kinetolens.load(trace_path(f"tracelens/h100/{name}.json.gz"))
        self.ops = trace.ops.select("op_id", "parent_id", "name", "input_dims", "input_types").with_columns(
            key=pl.col("input_dims").map_elements(_norm_dims, return_dtype=pl.String),
            tkey=pl.col("input_types").map_elements(_norm_dims, return_dtype=pl.String),
        )
        work = op_work(trace)
        self.work = {r[0]: (r[1], r[2]) for r in work.select("op_id", "flops", "bytes").iter_rows()}
        self.names = dict(self.ops.select("op_id", "name").iter_rows())
        self.parent = dict(self.ops.select("op_id", "parent_id").iter_rows())
        self.children: dict[int, list[int]] = {}
        for op_id, parent in self.ops.select("op_id", "parent_id").iter_rows():
            if parent is not None:
                self.children.setdefault(parent, []).append(op_id)
        self.golden = GOLDEN / "tracelens" / "h100" / f"{name}_perf_report_csvs"

    def calls(self, name: str, dims: str, types: str) -> list[int]:
        match = (pl.col("name") == name) & (pl.col("key") == _norm_dims(dims)) & (pl.col("tkey") == _norm_dims(types))
        return self.ops.filter(match)["op_id"].to_list()

    def work_under(self, op_id: int, family: str) -> tuple[float, float]:
        """Summed work of ops of ``family`` at or below ``op_id``."""
        flops = moved = 0.0
        stack = [op_id]
        while stack:
            i = stack.pop()
            if i in self.work and REGISTRY[self.names[i]].family == family:
                flops += self.work[i][0]
                moved += self.work[i][1]
            stack.extend(self.children.get(i, []))
        return flops, moved

    def rows(self, csv_name: str) -> list[dict[str, str]]:
        path = self.golden / csv_name
        if not path.exists():
            return []
        with open(path, newline="") as f:
            return list(csv.DictReader(f))


@pytest.fixture(scope="module", params=MODELS)
def model(request: pytest.FixtureRequest) -> Model:
    return Model(request.param)


def _one(model: Model, name: str, dims: str, types: str, family: str) -> tuple[float, float]:
    found = model.calls(name, dims, types)
    assert found, f"no {name} {dims} in the trace"
    calls = [c for c in found if model.parent[c] not in found]  # an op re-dispatching to itself is one call
    results = {model.work_under(c, family) for c in calls}
    assert len(results) == 1, f"{name} {dims}: same shapes, different work {results}"
    return results.pop()


def test_gemm(model: Model) -> None:
    rows = model.rows("GEMM.csv")
    assert rows
    for r in rows:
        flops, moved = _one(model, r["name"], r["Input Dims_first"], r["Input type_first"], "gemm")
        tl_flops, tl_bytes = float(r["GFLOPS_first"]) * 1e9, float(r["Data Moved (MB)_first"]) * MIB
        bias = r["param: bias"] == "True"
        m, n = int(r["param: M"]), int(r["param: N"])
        batch = int(r["param: B"])
        expected = tl_flops - (batch * m * n if bias else 0)  # TraceLens adds the bias's M*N
        assert flops == pytest.approx(expected, rel=1e-9), r["name"]
        assert moved == pytest.approx(tl_bytes, rel=1e-9), r["name"]


def test_convolution(model: Model) -> None:
    rows = model.rows("CONV_fwd.csv")
    for r in rows:
        # TraceLens counts at aten::convolution; we count at the cuDNN call inside it
        flops, moved = _one(model, r["name"], r["Input Dims_first"], r["Input type_first"], "conv")
        assert flops == pytest.approx(float(r["GFLOPS_first"]) * 1e9, rel=1e-9)
        assert moved == pytest.approx(float(r["Data Moved (MB)_first"]) * MIB, rel=1e-9)
    if "Falconsai" in model.golden.name or "timesformer" in model.golden.name:
        assert rows


def test_sdpa(model: Model) -> None:
    for r in model.rows("SDPA_fwd.csv"):
        flops, moved = _one(model, r["name"], r["Input Dims_first"], r["Input type_first"], "attention")
        assert flops == pytest.approx(float(r["GFLOPS_first"]) * 1e9, rel=1e-9)
        b, h, lq = int(r["param: B"]), int(r["param: H_Q"]), int(r["param: N_Q"])
        lse = b * h * lq * 4  # fp32 log-sum-exp the flash kernel writes; TraceLens omits it
        assert moved == pytest.approx(float(r["Data Moved (MB)_first"]) * MIB + lse, rel=1e-9)
        if r["param: causal"] == "True":  # both halve causal attention
            dense = 4 * b * h * lq * int(r["param: N_KV"]) * int(r["param: d_h_qk"])
            assert flops == dense / 2


MOVES_ONLY = {"aten::copy_", "aten::upsample_nearest1d"}
ELEMENTWISE_FAMILIES = {"elementwise": "elementwise", "reduce": "reduction"}


def test_unified_summary(model: Model) -> None:
    """Every row of TraceLens' unified summary with a number: GEMM/conv/SDPA and elementwise/reduce."""
    checked = 0
    for r in model.rows("unified_perf_summary.csv"):
        if not r["GFLOPS"] or r["name"] in ("aten::addmm",):
            continue
        cat = r["op category"]
        family = {"GEMM": "gemm", "CONV_fwd": "conv", "SDPA_fwd": "attention", **ELEMENTWISE_FAMILIES}.get(cat)
        if family is None:
            continue
        name = r["name"]
        if name in MOVES_ONLY:
            family = "memory"
        flops, moved = _one(model, name, r["Input Dims"], r["Input type"], family)
        tl_flops, tl_bytes = float(r["GFLOPS"]) * 1e9, float(r["Data Moved (MB)"]) * MIB
        if name in MOVES_ONLY:
            assert flops == 0 and moved == pytest.approx(tl_bytes, rel=1e-9)
        elif name == "aten::mean":
            dims = ast.literal_eval(r["Input Dims"])[0]
            reduced = ast.literal_eval(ast.literal_eval(r["Concrete Inputs"])[1])
            kept = math.prod(d for i, d in enumerate(dims) if i not in {k % len(dims) for k in reduced})
            itemsize = dtype_bytes(ast.literal_eval(r["Input type"])[0])
            assert flops == pytest.approx(tl_flops, rel=1e-9)
            # TraceLens writes 1 output element; the op writes ``kept`` of them
            assert moved - tl_bytes == pytest.approx((kept - 1) * itemsize, rel=1e-9)
        elif cat == "SDPA_fwd":
            assert flops == pytest.approx(tl_flops, rel=1e-9) and moved > tl_bytes
        else:
            assert flops == pytest.approx(tl_flops, rel=1e-9), (name, r["Input Dims"])
            assert moved == pytest.approx(tl_bytes, rel=1e-9), (name, r["Input Dims"])
        checked += 1
    assert checked >= 3



def test_kernel_and_op_tables_carry_the_work() -> None:
    """Kernel FLOPs add up to their ops' FLOPs; the kernels and ops reports show them with rates."""
    from kinetolens.analysis.hardware.kernels import kernel_table
    from kinetolens.analysis.workload.ops import op_stats
    from kinetolens.analysis.workload.work import kernel_work

    trace = kinetolens.load(trace_path(f"tracelens/h100/{MODELS[0]}.json.gz"))
    ops, kernels = op_work(trace), kernel_work(trace)
    parent = dict(trace.ops.select("op_id", "parent_id").iter_rows())
    carriers = set(ops["op_id"].to_list())

    def carrier(op_id: int) -> int:
        while op_id not in carriers:
            op_id = parent[op_id]
        return op_id

    launched = trace.kernels.select("kernel_id", "op_id").join(kernels, on="kernel_id")
    launched = launched.with_columns(pl.col("op_id").map_elements(carrier, return_dtype=pl.Int64))
    per_op = launched.group_by("op_id").agg(pl.col("flops").sum(), pl.col("bytes").sum())
    joined = per_op.join(ops, on="op_id", suffix="_op")
    assert joined.height == per_op.height > 100
    assert (joined["flops"] - joined["flops_op"]).abs().max() < 1e-3 * joined["flops_op"].max()
    # the one convolution ran 4 compute kernels (layout transforms + conv): its split is estimated
    conv = trace.ops.filter(pl.col("name") == "aten::cudnn_convolution")["op_id"][0]
    est = launched.join(trace.kernels.select("kernel_id", "kind"), on="kernel_id").filter(pl.col("op_id") == conv)
    assert est.filter(pl.col("kind") == "kernel")["estimated"].all()
    assert not launched.filter(pl.col("op_id") != conv)["estimated"].any()

    table = kernel_table(trace)
    gemm = table.filter(pl.col("op") == "aten::addmm")
    assert gemm["flops"].null_count() == 0
    assert (gemm["tflops_s"] - gemm["flops"] / (gemm["dur_us"] * 1e6)).abs().max() < 1e-9
    assert gemm["tflops_s"].max() < 990  # below the H100 SXM dense BF16 peak
    by_kernel = dict(kernels.select("kernel_id", "bytes").iter_rows())
    assert gemm["bytes"].to_list() == [by_kernel[i] for i in gemm["idx"].to_list()]
    assert (gemm["gbps"] - gemm["bytes"] / (gemm["dur_us"] * 1e3)).abs().max() < 1e-9
    kstats = op_stats(trace, by="kernel")
    assert kstats["bytes"].sum() == pytest.approx(kernels["bytes"].sum())

    stats = op_stats(trace).filter(pl.col("name") == "aten::addmm")
    total_flops = ops.join(trace.ops.select("op_id", "name"), on="op_id").filter(pl.col("name") == "aten::addmm")
    assert stats["flops"][0] == pytest.approx(total_flops["flops"].sum())
    assert stats["tflops_s"][0] == pytest.approx(stats["flops"][0] / (stats["device_total_us"][0] * 1e6))
