"""Which compute ceiling an op is held to, and what its precision column says.

a matrix op whose kernels' Tensor Core use is unknown
must never be held to the CUDA-core FP32 peak, and the precision column
shows the op's own dtype.
"""

from __future__ import annotations

import polars as pl
import pytest
from click.testing import CliRunner

import kinetolens.analysis.hardware.roofline as roofline
from kinetolens.cli.main import cli
from kinetolens.loader import load
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from tests.conftest import trace_path

# MI300X, bf16: a hipBLASLt GEMM (Tensor/Matrix Core name) and ROCm's Triton
# flash attention kernel ``attn_fwd``, whose name says nothing about the unit.
TRITON = "tracelens/torch_compile_triton/trace.json.gz"
QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
BF16_TRACES = [
    QWEN,
    "tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz",
    "tracelens/b200/eager_trace.json.gz",
    "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/mi300/Falconsai_nsfw_image_detection__1016002.json.gz",
    TRITON,
]
ATTENTION = "aten::_scaled_dot_product_flash_attention"


@pytest.fixture(scope="module")
def triton():
    t = load(str(trace_path(TRITON)))
    return t, gpu_spec(t)


def test_unknown_tensor_core_verdict_bf16_attention_gets_the_bf16_tensor_peak(triton) -> None:
    # Held to MI300X's FP32 vector peak (163.4 TFLOP/s) the
    # attention call ran at 183% of its "roof" and lost no time; against the
    # bf16 matrix-core peak (1307.4) it runs at 23% and loses 2.8 ms.
    t, spec = triton
    ops = roofline.op_roofline(t, spec).filter(pl.col("name") == ATTENTION)
    assert ops.height == 1
    row = ops.row(0, named=True)
    assert row["tc"] == "unknown" and row["dtype"] == "bf16"
    assert row["peak_tflops"] == spec.tflops["bf16"] == 1307.4
    assert row["ceiling"] == "bf16 tensor" and row["ceiling_assumed"] is True
    assert 0 < row["pct_of_roof"] < 100
    assert row["lost_us"] > 2000  # regression pin: 2842.5 us on this trace
    by_op = roofline.roofline_by(t, spec).filter(pl.col("op") == ATTENTION).row(0, named=True)
    assert by_op["lost_us"] == pytest.approx(row["lost_us"])
    assert by_op["assumed_us"] == pytest.approx(row["device_us"])
    assert by_op["ceiling"] == "bf16 tensor"


def test_kernel_rows_use_the_same_ceiling_as_their_op(triton) -> None:
    # the kernel view agrees with the op view.
    t, spec = triton
    k = roofline.kernel_roofline(t, spec).filter(pl.col("name") == "attn_fwd")
    assert k.height == 1
    assert k["peak_tflops"][0] == spec.tflops["bf16"]
    assert k["ceiling"][0] == "bf16 tensor" and k["ceiling_assumed"][0]
    assert k["pct_of_roof"][0] < 100


@pytest.mark.parametrize(
    ("name", "dtype", "tc", "expected"),
    [
        ("aten::mm", "bf16", "yes", ("bf16 tensor", False)),
        ("aten::mm", "fp32", "yes", ("tf32 tensor", False)),
        ("aten::mm", "bf16", "unknown", ("bf16 tensor", True)),  # Triton template GEMM (triton_tem_fused_mm_*)
        ("aten::convolution_backward", "fp16", "unknown", ("fp16 tensor", True)),
        ("aten::_scaled_mm", "fp8", "unknown", ("fp8 tensor", True)),
        # fp32 / fp64 matrix ops: TF32 / FP64 Tensor Cores or not, the name does not say; no guess.
        ("aten::mm", "fp32", "unknown", (None, False)),
        ("aten::bmm", "fp64", "unknown", (None, False)),
        ("aten::mm", "bf16", "no", ("fp32 vector", False)),  # known CUDA-core kernel
        ("aten::mv", "bf16", "unknown", ("fp32 vector", False)),  # gemv runs on CUDA cores
        ("aten::mul", "bf16", "unknown", ("fp32 vector", False)),  # not a matrix op
        ("aten::mm", None, "yes", (None, False)),
    ],
)
def test_ceiling_rules(name: str, dtype: str | None, tc: str, expected: tuple[str | None, bool]) -> None:
    assert roofline.ceiling(name, dtype, tc) == expected


@pytest.mark.parametrize("rel", BF16_TRACES)
def test_no_half_precision_matrix_op_is_held_to_the_fp32_vector_peak(rel: str) -> None:
    # on every bf16 trace, a matrix op not known to run on
    # CUDA cores is held to its dtype's Tensor Core peak, never the FP32 one.
    t = load(str(trace_path(rel)))
    spec = gpu_spec(t)
    ops = roofline.op_roofline(t, spec)
    matrix = ops.filter(
        pl.col("name").map_elements(roofline.tensor_core_op, return_dtype=pl.Boolean)
        & pl.col("dtype").is_in(["bf16", "fp16"])
        & (pl.col("tc") != "no")
    )
    assert matrix.height > 0
    peaks = matrix.select(peak=pl.col("peak_tflops"), want=pl.col("dtype").replace_strict(dict(spec.tflops), default=None))
    assert (peaks["peak"] == peaks["want"]).all()


def test_precision_column_is_the_ops_dtype() -> None:
    # bf16 elementwise ops were labelled fp32 (the peak
    # they are held to), in every view.
    t = load(str(trace_path(QWEN)))
    spec = gpu_spec(t)
    ops = roofline.op_roofline(t, spec)
    mul = ops.filter(pl.col("name") == "aten::mul")
    assert set(mul["dtype"]) == {"bf16", "fp32"}  # RoPE and RMSNorm in fp32, the rest in bf16
    assert (mul["precision"] == mul["dtype"]).all()
    assert set(mul["ceiling"]) == {"fp32 vector"}  # the roof is still the CUDA-core peak
    # Only fp32 on Tensor Cores reads differently: it computes in TF32.
    differs = ops.filter(pl.col("precision") != pl.col("dtype"))
    assert set(differs["precision"]) <= {"tf32"} and set(differs["dtype"]) <= {"fp32"}
    k = roofline.kernel_roofline(t, spec)
    k_mul = k.filter(pl.col("op") == "aten::mul")
    assert "bf16" in set(k_mul["precision"])
    by_op = roofline.roofline_by(t, spec).filter(pl.col("op") == "aten::mul")
    assert by_op["precision"][0] == "bf16"  # the call with the most FLOPs


def test_cli_marks_an_assumed_ceiling_and_fits_100_columns() -> None:
    # the terminal says which ceiling is assumed, and the
    # table stays readable at 100 columns (the op names are not squeezed out).
    result = CliRunner().invoke(cli, ["roofline", str(trace_path(TRITON)), "-w", "100"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 100
    attention = next(line for line in lines if line.startswith("│ aten::_scaled_"))  # one line, cut in the middle
    assert "bf16 TC*" in attention
    mm = next(line for line in lines if "│ aten::mm " in line)
    assert "bf16 TC " in mm
    assert "Tensor Core peak assumed for 1 call" in result.output.replace("\n", " ")


def test_where_reads_the_dtype_of_its_values_not_its_condition() -> None:
    # torch.where(cond, a, b)
    # computes in a's and b's dtype; its first input is the bool condition.
    t = load(str(trace_path("hta/trace_diff/control/control.json.gz")))
    ops = roofline.op_roofline(t, gpu_spec(t)).filter(pl.col("name") == "aten::where")
    types = t.ops.filter(pl.col("name") == "aten::where").select("op_id", "input_types")
    ops = ops.join(types, on="op_id")
    assert ops.height > 0
    # With two Scalars the condition is the only tensor whose dtype is recorded.
    expected = {'["bool", "float", "float"]': "fp32", '["bool", "long", "long"]': "int64",
                '["bool", "Scalar", "Scalar"]': "bool"}  # fmt: skip
    assert set(ops["input_types"]) <= set(expected)
    for row in ops.iter_rows(named=True):
        assert row["precision"] == row["dtype"] == expected[row["input_types"]], row
