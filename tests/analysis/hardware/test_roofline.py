"""Roofline per kernel, op and module on real H100 and B200 traces."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from kinetolens.analysis.hardware.kernels import kernel_table
from kinetolens.analysis.hardware.roofline import (
    kernel_groups,
    kernel_roofline,
    launched_roofline_by,
    op_roofline,
    roofline_by,
)
from kinetolens.cli.main import cli
from kinetolens.errors import TraceError
from kinetolens.loader import load
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from tests.conftest import trace_path

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
VIT = "tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz"
B200 = "tracelens/b200/eager_trace.json.gz"
MTIA = "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz"
ELEMENTWISE = {"aten::mul", "aten::add", "aten::add_", "aten::silu", "aten::pow", "aten::gelu", "aten::copy_", "aten::fill_"}


@pytest.fixture(scope="module")
def qwen():
    t = load(str(trace_path(QWEN)))
    return t, gpu_spec(t)


@pytest.mark.parametrize("rel", [QWEN, VIT, B200])
def test_percent_of_roof_within_0_and_100(rel: str) -> None:
    # Minimum bytes are a floor on DRAM traffic and dense peaks a ceiling on
    # FLOP/s, so no kernel can beat its roof unless its inputs sit in L2
    # (bandwidth above DRAM's).  None does in these traces; the bound keeps
    # 5% of headroom for that and for ~1 us timestamp granularity.
    t = load(str(trace_path(rel)))
    k = kernel_roofline(t, gpu_spec(t))
    pct = k["pct_of_roof"].drop_nulls()
    assert pct.len() > 0.9 * k.height
    assert pct.min() >= 0.0 and pct.max() <= 105.0  # type: ignore[operator]
    ops = op_roofline(t, gpu_spec(t))
    assert ops["pct_of_roof"].drop_nulls().max() <= 105.0  # type: ignore[operator]


def test_large_bf16_gemms_compute_bound_near_dense_peak(qwen) -> None:
    t, spec = qwen
    k = kernel_roofline(t, spec)
    big = k.filter((pl.col("op") == "aten::mm") & (pl.col("flops") > 1e10))
    assert big.height >= 24
    assert set(big["precision"]) == {"bf16"} and set(big["tc"]) == {"yes"}
    assert set(big["bound"]) == {"compute"}
    # cuBLAS sm90 bf16 GEMMs of 8944x1024x2816 reach 600-700 of 989.5 TFLOP/s.
    assert 55.0 < big["pct_of_roof"].median() < 90.0  # type: ignore[operator]
    assert big["achieved_tflops"].max() < spec.peak_tflops("bf16")  # type: ignore[operator]


@pytest.mark.parametrize("rel", [QWEN, B200])
def test_elementwise_ops_memory_bound(rel: str) -> None:
    t = load(str(trace_path(rel)))
    ops = op_roofline(t, gpu_spec(t)).filter(pl.col("name").is_in(ELEMENTWISE) & pl.col("bound").is_not_null())
    assert ops.height > 10
    assert set(ops["bound"]) == {"memory"}
    assert (ops["intensity"].drop_nulls() < 2.0).all()


def test_hand_computed_gemm_kernel(qwen) -> None:
    # Kernel 564: aten::mm [8944, 1024] x [1024, 2816] bf16 on cuBLAS's sm90 kernel, 85.727 us.
    t, spec = qwen
    row = kernel_roofline(t, spec).filter(pl.col("kernel_id") == 564).row(0, named=True)
    m, k, n = 8944, 1024, 2816
    flops = 2.0 * m * n * k
    moved = 2.0 * (m * k + k * n + m * n)
    assert row["flops"] == flops and row["bytes"] == moved
    assert row["dur_us"] == pytest.approx(85.727)
    ideal_us = max(flops / 989.5e12, moved / 3350e9) * 1e6  # H100 SXM dense bf16, HBM3
    assert row["ideal_us"] == pytest.approx(ideal_us)
    assert row["intensity"] == pytest.approx(flops / moved)
    assert row["attainable_tflops"] == pytest.approx(989.5)
    assert row["achieved_tflops"] == pytest.approx(flops / 85.727e-6 / 1e12)
    assert row["pct_of_roof"] == pytest.approx(ideal_us / 85.727 * 100)
    assert row["pct_of_roof"] == pytest.approx(60.81, abs=0.01)


def test_time_lost_sums_agree_across_groupings(qwen) -> None:
    from kinetolens.model.earlier_launches import without_earlier_iteration

    t, spec = qwen
    # the groupings count the recorded step's calls: the previous iteration's tail is in no step
    ops = op_roofline(without_earlier_iteration(t), spec)
    assert ops.height < op_roofline(t, spec).height
    by_op, by_module = roofline_by(t, spec, "op"), roofline_by(t, spec, "module")
    for col in ("device_us", "lost_us", "lost_75_us"):
        assert by_op[col].sum() == pytest.approx(ops[col].sum())
        assert by_module[col].sum() == pytest.approx(ops[col].sum())
    # A module row's calls are the times the module ran; its op calls are ``ops``.
    assert by_op["calls"].sum() == ops.height == by_module["ops"].sum()
    known = ops.filter(pl.col("ideal_us").is_not_null())
    # Lost time is device minus ideal per call, never below zero, and more against 75%.
    assert known["lost_us"].to_list() == pytest.approx((known["device_us"] - known["ideal_us"]).clip(0).to_list())
    assert (known["lost_75_us"] <= known["lost_us"]).all()
    assert by_op["lost_us"].is_sorted(descending=True)
    # Ops with a roofline hold 70% of this trace's kernel time (the rest runs
    # in ops without a FLOP/byte formula); a time join that dropped kernels would fall below.
    covered = ops["device_us"].sum() / (t.kernels["dur"].sum() / 1000)
    assert 0.65 < covered <= 1.0


def test_overrides_change_the_roof(qwen) -> None:
    t, _ = qwen
    slow = gpu_spec(t, peak_tflops=100.0, peak_gbps=1000.0)
    k = kernel_roofline(t, slow).filter(pl.col("kernel_id") == 564).row(0, named=True)
    flops, moved = k["flops"], k["bytes"]
    assert k["peak_tflops"] == 100.0
    assert k["ideal_us"] == pytest.approx(max(flops / 100e12, moved / 1000e9) * 1e6)
    # 100 TFLOP/s is below what the kernel achieved (~600): beyond a roof the user set too low.
    assert k["pct_of_roof"] > 100.0
    # Bandwidth alone: a memory-bound op's ideal time scales with 1/bandwidth.
    base = op_roofline(t, gpu_spec(t)).filter(pl.col("name") == "aten::mul")
    half = op_roofline(t, gpu_spec(t, peak_gbps=1675.0)).filter(pl.col("name") == "aten::mul")
    assert half["ideal_us"].sum() == pytest.approx(2 * base["ideal_us"].sum())


def test_unknown_gpu_without_overrides_is_a_clear_error() -> None:
    t = load(str(trace_path(MTIA)))
    assert gpu_spec(t) is None
    with pytest.raises(TraceError, match="unknown GPU .*--peak-tflops"):
        op_roofline(t, gpu_spec(t))
    result = CliRunner().invoke(cli, ["roofline", str(trace_path(MTIA))], standalone_mode=False)
    assert isinstance(result.exception, TraceError)


def test_cli_html_chart(tmp_path: Path) -> None:
    out = tmp_path / "roof.html"
    result = CliRunner().invoke(cli, ["roofline", str(trace_path(VIT)), "-o", str(out), "-w", "200"])
    assert result.exit_code == 0, result.output
    assert "aten::addmm" in result.output and "lost" in result.output
    html = out.read_text()
    assert "plotly" in html and "Plotly.newPlot" in html
    assert len(html) > 1_000_000  # plotly.js inlined: opens offline
    for name in ("aten::addmm", "aten::_scaled_dot_product_flash_attention", "DRAM 3,350 GB", "bf16 tensor peak 989.5"):
        assert name in html


def test_cli_json_by_module() -> None:
    import json

    result = CliRunner().invoke(cli, ["roofline", str(trace_path(QWEN)), "--by", "module", "--json"])
    assert result.exit_code == 0
    rows = json.loads(result.output)
    assert rows[0]["module"].startswith("Qwen2Model_0.Qwen2DecoderLayer_")
    assert all(not math.isnan(r["lost_us"]) for r in rows)


def test_cli_svg_chart_or_a_clear_error(tmp_path: Path) -> None:
    """With kaleido and a Chromium, an SVG with the roofs and the ops; without, exit 2 and one line."""
    import shutil

    out = tmp_path / "r.svg"
    result = CliRunner().invoke(cli, ["roofline", str(trace_path(VIT)), "-o", str(out)], standalone_mode=False)
    try:
        import kaleido  # noqa: F401
    except ModuleNotFoundError:
        assert isinstance(result.exception, TraceError) and "kaleido" in str(result.exception)
        return
    if not (shutil.which("chromium") or shutil.which("google-chrome")):
        assert isinstance(result.exception, TraceError) and "kaleido" in str(result.exception)
        return
    assert result.exception is None, result.output
    svg = out.read_text()
    assert svg.startswith("<svg") and svg.count("<path") > 10
    for text in ("DRAM 3,350 GB", "bf16 tensor peak 989.5"):
        assert text in svg


def _ops_json(*args: str) -> list[dict]:
    import json

    result = CliRunner().invoke(cli, ["ops", str(trace_path(QWEN)), "-t", "1000", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_ops_order_by_lost_us_is_roofline_order(qwen) -> None:
    t, spec = qwen
    rows = _ops_json("--order-by", "lost_us")
    with_roof = [r for r in rows if r["lost_us"] is not None]
    # ranked by self time, an op's roof is that of the kernels it launched itself
    # (aten::_flash_attention_forward's, not aten::_scaled_dot_product_flash_attention's)
    expected = launched_roofline_by(t, spec, "op").filter(pl.col("lost_us").is_not_null())
    expected = expected.sort(["lost_us", "name"], descending=[True, False]).rename({"name": "op"})
    # Same lost time per op as the roofline (joined, not recomputed) ...
    # (JSON times are rounded to the clock's nanosecond)
    lost = dict(zip(expected["op"], expected["lost_us"]))
    assert {r["name"]: r["lost_us"] for r in with_roof} == pytest.approx(lost, abs=5e-4)
    # ... losing in all what the roofline's carrying ops lose
    assert sum(lost.values()) == pytest.approx(roofline_by(t, spec, "op")["lost_us"].sum())
    inclusive = [r for r in _ops_json("--order-by", "lost_us", "--inclusive") if r["lost_us"] is not None]
    carried = roofline_by(t, spec, "op").filter(pl.col("lost_us") > 0)
    assert {r["name"]: r["lost_us"] for r in inclusive if r["lost_us"] > 0} == pytest.approx(
        dict(zip(carried["op"], carried["lost_us"])), abs=5e-4
    )
    # (aten::cat records no byte count for its tensor list, so no roof: null in both.)
    known = expected.filter(pl.col("pct_of_roof").is_not_null())
    pct = {r["name"]: r["pct_of_roof"] for r in with_roof if r["pct_of_roof"] is not None}
    assert pct == pytest.approx(dict(zip(known["op"], known["pct_of_roof"])))
    # ... and the same order: every op with a roofline first, by lost time.
    assert [r["lost_us"] for r in rows[: len(with_roof)]] == expected["lost_us"].round(3).to_list()
    assert [r["name"] for r in with_roof][:5] == expected["op"].head(5).to_list()
    # regression pin: the step's own calls (4,295.234 us with the previous iteration's tail, which is in no step)
    assert rows[0]["name"] == "aten::mul" and rows[0]["lost_us"] == pytest.approx(3010.114, abs=1e-3)
    # aten::linear carries no work itself (its aten::addmm does, where the loss is counted).
    assert next(r for r in rows if r["name"] == "aten::linear")["lost_us"] is None


def test_ops_lost_us_by_module_and_step(qwen) -> None:
    t, spec = qwen
    rows = _ops_json("--aggregate-by", "module", "--order-by", "lost_us")
    total = sum(r["lost_us"] for r in rows if r["lost_us"] is not None)
    assert total == pytest.approx(roofline_by(t, spec, "module")["lost_us"].sum())
    step = int(t.ops["step"].drop_nulls().min())  # type: ignore[arg-type]
    in_step = roofline_by(t, spec, "op", step=step)
    assert 0 < in_step["lost_us"].sum() <= roofline_by(t, spec, "op")["lost_us"].sum()
    rows = _ops_json("--order-by", "lost_us", "--step", str(step))
    assert sum(r["lost_us"] or 0.0 for r in rows) == pytest.approx(in_step["lost_us"].sum())


def test_ops_lost_us_without_gpu_spec_exits_2() -> None:
    result = CliRunner().invoke(cli, ["ops", str(trace_path(MTIA)), "--order-by", "lost_us"])
    assert result.exit_code == 2
    assert "not in the spec table" in result.output
    result = CliRunner().invoke(cli, ["ops", str(trace_path(MTIA)), "--json"])
    assert result.exit_code == 0 and "lost_us" not in result.output


def test_kernel_groups_add_up_and_weigh_roofline_by_time() -> None:
    t = load(str(trace_path(VIT)))
    spec = gpu_spec(t)
    table, roof = kernel_table(t), kernel_roofline(t, spec)
    groups = kernel_groups(table, roof, "name")
    assert groups["calls"].sum() == table.height
    assert groups["total_us"].sum() == pytest.approx(table["dur_us"].sum())
    # The top kernel's percent of roofline, from the per-kernel roofline by hand.
    top = groups.row(0, named=True)
    mine = (
        table.filter(pl.col("kernel") == top["kernel"])
        .join(roof.select(idx="kernel_id", ideal_us="ideal_us"), on="idx")
        .filter(pl.col("ideal_us").is_not_null())
    )
    assert mine.height > 0
    assert top["pct_of_roof"] == pytest.approx(mine["ideal_us"].sum() / mine["dur_us"].sum() * 100)
    # Without a GPU spec there is no roof, and grouping by op splits rows.
    assert kernel_groups(table, None, "name")["pct_of_roof"].null_count() == groups.height
    assert kernel_groups(table, roof, "name+op").height >= groups.height


def test_work_faster_than_its_roof_is_flagged_not_taken_as_a_figure() -> None:
    # MI300X ResNet-18: each aten::zero_ under MaxPool2d writes 822 MB in about
    # 145 us, 5.67 TB/s against the 5.3 TB/s the MI300X's HBM peaks at, so the
    # module reads 106.8% of roof. The model is off for it (an op cannot beat
    # its roof): every such row carries beats_model and the views say so.
    from kinetolens.analysis.hardware.module_tree import module_tree
    from kinetolens.analysis.hardware.roofline import BEATS_MODEL, op_roofline, roofline_by
    from tests.terminal import cli_text

    path = trace_path("tracelens/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz")
    trace = load(path)
    spec = gpu_spec(trace)
    for frame in (op_roofline(trace, spec), roofline_by(trace, spec, by="module"), module_tree(trace, spec)):
        over = frame.filter(pl.col("pct_of_roof") > 100)
        assert over.height and over[BEATS_MODEL].all()
        assert not frame.filter(pl.col("pct_of_roof") <= 100)[BEATS_MODEL].fill_null(False).any()
    pool = module_tree(trace, spec).filter(pl.col("name") == "MaxPool2d_0").row(0, named=True)
    assert pool["pct_of_roof"] == pytest.approx(106.82, abs=0.01) and pool[BEATS_MODEL]
    out = " ".join(cli_text("modules", str(path), columns=100).split())
    assert "above 100% of roof: MaxPool2d_0 106.8%: faster than the roofline model allows" in out
