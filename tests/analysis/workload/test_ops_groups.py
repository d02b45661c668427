"""Grouped op tables: every column aggregated by its own meaning, and the
attributes shown beside a group key true of the whole group."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.hardware.kernels import kernel_table
from kinetolens.analysis.workload.ops import op_stats, order_and_filter
from kinetolens.analysis.hardware.roofline import kernel_groups
from tests.conftest import trace_path

RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
TIMES = ("device_self_us", "device_total_us", "host_self_us", "host_total_us")


@pytest.fixture(scope="module")
def resnet() -> kinetolens.Trace:
    return kinetolens.load(trace_path(RESNET))


def _row(table: pl.DataFrame, name: str) -> dict:
    return table.filter(pl.col("name") == name).row(0, named=True)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, timeout=180, env=env
    )


# -- --aggregate count --------------------------------------------


def test_count_keeps_times_and_work_as_sums(resnet: kinetolens.Trace) -> None:
    # count filled every time column with count/1000 and FLOPs/bytes with the count.
    summed = op_stats(resnet, aggregate="sum")
    counted = op_stats(resnet, aggregate="count")
    add_s, add_c = _row(summed, "aten::add_"), _row(counted, "aten::add_")
    # Independent: aten::add_'s calls and the GPU time of the kernels those calls launched.
    ops = resnet.ops.filter((pl.col("name") == "aten::add_") & (pl.col("kind") == "op"))
    kernel_us = resnet.kernels.filter(pl.col("op_id").is_in(ops["op_id"].implode()))["dur"].sum() / 1000.0
    assert add_c["calls"] == ops.height == 2994
    assert add_c["device_total_us"] == pytest.approx(kernel_us) and kernel_us > 20_000
    for col in (*TIMES, "flops", "bytes", "tflops_s", "gbps", "step_share_pct"):
        assert add_c[col] == pytest.approx(add_s[col]), col


@pytest.mark.parametrize("aggregate", ["sum", "count", "mean", "max", "min"])
def test_rates_and_step_share_agree_with_the_shown_columns(resnet: kinetolens.Trace, aggregate: str) -> None:
    # GB/s must be the shown bytes over the shown time wherever both are the
    # group's (sum, count, mean: every aten::add_ call carries bytes, so mean/mean = sum/sum), and
    # the step share is of the summed time under every aggregate.
    table = op_stats(resnet, aggregate=aggregate)
    summed = _row(op_stats(resnet), "aten::add_")
    row = _row(table, "aten::add_")
    if aggregate in ("sum", "count", "mean"):
        assert row["gbps"] == pytest.approx(row["bytes"] / (row["device_total_us"] * 1000.0))
    assert row["step_share_pct"] == pytest.approx(summed["step_share_pct"])
    assert row["calls"] == 2994


def test_kernel_grouping_count_is_sums(resnet: kinetolens.Trace) -> None:
    # device time under count is the kernels' summed time.
    table = op_stats(resnet, by="kernel", aggregate="count")
    expected = resnet.kernels.group_by("name").agg(n=pl.len(), us=pl.col("dur").sum() / 1000.0)
    joined = table.join(expected, on="name")
    assert joined.height == expected.height
    assert (joined["calls"] == joined["n"]).all()
    assert (joined["device_total_us"] - joined["us"]).abs().max() < 1e-6


def test_running_total_only_of_columns_that_add_up(resnet: kinetolens.Trace) -> None:
    # a running total of means (or of percents of roof) is meaningless.
    counted = order_and_filter(op_stats(resnet, aggregate="count"), order_by="calls", aggregate="count")
    assert counted["cumulative"].to_list() == counted["calls"].cum_sum().to_list()
    mean = order_and_filter(op_stats(resnet, aggregate="mean"), order_by="device_total_us", aggregate="mean")
    assert "cumulative" not in mean.columns


def test_cli_count_ranks_by_calls_with_summed_times() -> None:
    # As the user sees it.
    proc = _cli("ops", str(trace_path(RESNET)), "--aggregate", "count", "-t", "5", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    calls = [r["calls"] for r in rows]
    assert calls == sorted(calls, reverse=True) and calls[0] == 4404  # aten::empty
    add = next(r for r in rows if r["name"] == "aten::add_")
    assert add["device_total_us"] > 20_000 and add["bytes"] > 1e10


# -- attributes of a group keyed by name ---------------------------


def test_op_group_shows_every_direction_with_counts(resnet: kinetolens.Trace) -> None:
    # aten::add_ was labelled "optimizer" (the mode) with one shape.
    row = _row(op_stats(resnet), "aten::add_")
    ops = resnet.ops.filter((pl.col("name") == "aten::add_") & (pl.col("kind") == "op"))
    counts = ops["direction"].cast(pl.String).value_counts().sort("count", descending=True)
    expected = ", ".join(f"{d} {n}" for d, n in counts.iter_rows())
    assert row["direction"] == expected == "optimizer 1932, bprop 966, fprop 96"
    assert row["in_shapes"].startswith("mixed (") and row["dtypes"].startswith("mixed (")
    # A group whose calls agree shows the value itself.
    conv = _row(op_stats(resnet), "aten::cudnn_convolution_backward_weight")
    assert conv["direction"] == "bprop"


def test_mixed_shapes_count_the_distinct_shapes(resnet: kinetolens.Trace) -> None:
    # the count in "mixed (N distinct)" is the number of distinct input shapes.
    by_shape = op_stats(resnet, by="op+shape").filter(pl.col("name") == "aten::add_")
    row = _row(op_stats(resnet), "aten::add_")
    assert row["in_shapes"] == f"mixed ({by_shape.height} distinct)"
    # Grouped by shape, the shown shapes are the key.
    assert (by_shape["in_shapes"] == by_shape["shapes"]).all()


def test_kernel_groups_list_every_launching_op() -> None:
    # Kernels grouped by name (ops --aggregate-by kernel and the dashboard's
    # kernel table): the op column named one op for kernels launched by several, and its counts
    # (with the kernels no op launched) add up to the calls.
    trace = kinetolens.load(trace_path(QWEN))
    gemm = (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
        "_execute_segment_k_off_kernel__5x_cublas"
    )
    k = trace.kernels.filter(pl.col("name") == gemm)
    launched = k["op"].fill_null("(no op)").value_counts().sort("count", descending=True)
    expected = ", ".join(f"{o} {n}" for o, n in launched.iter_rows())
    assert launched.height > 1
    assert _row(op_stats(trace, by="kernel"), gemm)["op"] == expected
    grouped = kernel_groups(kernel_table(trace), None).filter(pl.col("kernel") == gemm).row(0, named=True)
    assert grouped["op"] == expected


def test_cli_ops_table_fits_120_columns() -> None:
    # at COLUMNS=120 the default table fits, and
    # the mixed directions are listed.
    for args in (["-t", "30"], ["--aggregate", "count", "-t", "5"], ["--aggregate-by", "kernel", "-t", "10"]):
        proc = _cli("ops", str(trace_path(RESNET)), *args)
        assert proc.returncode == 0, proc.stderr
        assert max(len(line) for line in proc.stdout.splitlines()) <= 120, args
        assert "calls" in proc.stdout
    proc = _cli("ops", str(trace_path(RESNET)), "--aggregate", "count", "-t", "5")
    assert "optimizer 1932, bprop 966" in proc.stdout


def test_report_top_ops_say_when_shapes_are_mixed() -> None:
    # aten::linear runs with 4 input shapes in this trace, and the
    # report's "Top ops" showed one of them.
    from kinetolens.views.report_data import collect
    from kinetolens.views.report_md import render_md

    trace = kinetolens.load(trace_path(QWEN))
    shapes = op_stats(trace, by="op+shape").filter(pl.col("name") == "aten::linear").height
    assert shapes == 4
    md = render_md(collect(trace))
    top_ops = md[md.index("## Top ops") : md.index("## Top kernels")]
    # the top ops rank by self time, where aten::linear (whose kernels are aten::mm's) is not;
    # aten::mm, its GEMM with the same 3 weight shapes, is.
    mm_shapes = op_stats(trace, by="op+shape").filter(pl.col("name") == "aten::mm").height
    line = next(li for li in top_ops.splitlines() if li.startswith("| aten::mm |"))
    assert line.rstrip().endswith(f"| mixed ({mm_shapes} distinct) |") and mm_shapes == 3


def test_kernel_occupancy_is_weighted_by_duration(resnet: kinetolens.Trace) -> None:
    # Same fault: a column aggregated against its meaning: a kernel name's
    # blocks per SM and occupancy are those of the time it ran.  torch-tb-profiler's kernel view
    # ("Mean Blocks Per SM", "Mean Est. Achieved Occupancy (%)", weighted by duration, rounded to
    # 2 decimals) on the same trace is the reference; the unweighted mean gave 20.1% for the
    # elementwise kernel tb-profiler reports at 92.32%.
    from tests.conftest import GOLDEN

    golden = json.loads((GOLDEN / "tb_plugin" / f"{RESNET.replace('/', '__')}.json").read_text())
    ours = op_stats(resnet, by="kernel")
    grouped = kernel_groups(kernel_table(resnet), None)
    for name, _tc, calls, total_us, _mean, _max, _min, blocks, occupancy in golden["top_kernels"]:
        row = _row(ours, name)
        assert (row["calls"], row["device_total_us"]) == (calls, total_us)
        assert row["blocks_per_sm"] == pytest.approx(blocks, abs=0.006), name
        assert row["occupancy"] == pytest.approx(occupancy, abs=0.006), name
        group = grouped.filter(pl.col("kernel") == name).row(0, named=True)
        assert group["occupancy"] == pytest.approx(occupancy, abs=0.006), name


def test_step_share_of_one_step_is_of_that_step(resnet: kinetolens.Trace) -> None:
    # with --step the times are one step's, and the share was taken
    # of all six steps' wall time (aten::cudnn_convolution_backward: 4.27% instead of 26.0%).  The
    # step's wall time is torch-tb-profiler's for step 6 (175,153 us), which kinetolens summary shows.
    from tests.conftest import GOLDEN

    golden = json.loads((GOLDEN / "tb_plugin" / f"{RESNET.replace('/', '__')}.json").read_text())
    step6_us = golden["step_costs_us"][golden["steps"].index("6")]["Total"]
    table = op_stats(resnet, step=6, inclusive=True)  # the share of the total is inclusive's
    row = _row(table, "aten::cudnn_convolution_backward")
    assert row["step_share_pct"] == pytest.approx(row["device_total_us"] / step6_us * 100.0, rel=1e-6)
    assert row["step_share_pct"] == pytest.approx(26.0, abs=0.05)


def test_profiler_step_ranges_are_not_ops(resnet: kinetolens.Trace) -> None:
    # Same fault, grouping keys: this 2021 trace records ProfilerStep#N as
    # cpu_op.  Each was a row of the op table ("ProfilerStep#6" third under --step 6), and as the
    # top-level op of its step it took the step's whole time in the module and source groupings:
    # the line holding prof.step() (resnet50_profiler_api.py:54) owned 216,936 us of GPU time.
    assert not op_stats(resnet)["name"].str.starts_with("ProfilerStep#").any()
    assert not op_stats(resnet, step=6)["name"].str.starts_with("ProfilerStep#").any()
    by_source = op_stats(resnet, by="source")
    assert by_source["device_total_us"].sum() == pytest.approx(resnet.kernels["dur"].sum() / 1000.0)
    assert _row(by_source.rename({"source": "name"}), "resnet50_profiler_api.py:54")["device_total_us"] == 0
    # The ranges stay in the table that asks for annotations too (their own GPU time, if any, is there).
    assert op_stats(resnet, include_annotations=True)["name"].str.starts_with("ProfilerStep#").sum() == 6


def test_tied_rows_come_in_the_keys_order_whatever_order_the_groups_came_in() -> None:
    # op tables come from a group-by in hash order; rows tied on the ranked
    # column (time lost 0, say) must not change places from run to run.
    table = pl.DataFrame({"name": ["c", "a", "d", "b"], "shapes": ["[2]", "[1]", "[1]", "[1]"], "calls": [1, 1, 1, 1],
                          "device_total_us": [5.0, 1.0, 1.0, 1.0], "lost_us": [0.0, 0.0, None, 2.0]})  # fmt: skip
    for order_by in ("lost_us", "+lost_us", "device_total_us"):
        ranked = [order_and_filter(table.sample(fraction=1.0, shuffle=True, seed=s), order_by=order_by)["name"].to_list() for s in range(6)]
        assert all(r == ranked[0] for r in ranked), (order_by, ranked)
    assert order_and_filter(table, order_by="lost_us")["name"].to_list() == ["b", "a", "c", "d"]
    assert order_and_filter(table, order_by="device_total_us")["name"].to_list() == ["c", "a", "b", "d"]
