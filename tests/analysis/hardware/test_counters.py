"""CUPTI counters per kernel: HTA's golden frame, derived FLOPs, the CLI."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.hardware.counters import FLOP_COUNTERS, NoCounters, counter_table
from kinetolens.analysis.hardware.tensor_cores import counter_verdicts, kernel_tensor_cores
from kinetolens.cli.main import main

from tests.conftest import GOLDEN, trace_path

CUPTI = "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz"
SASS = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return counter_table(kinetolens.load(trace_path(CUPTI)))


def _golden() -> dict:
    path = GOLDEN / "hta" / "hta__cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz.json"
    return json.loads(path.read_text())["calls"]["get_cupti_counter_data_with_operators"]["result"][0]


def test_agrees_with_hta_row_by_row(table: pl.DataFrame) -> None:
    golden = _golden()
    assert table.height == golden["row_count"] == 77
    counters = [c for c in golden["columns"] if c.startswith("smsp__")]
    assert len(counters) == 9
    for i, want in enumerate(golden["records"]):  # HTA stored the first 50 rows, in its (ts) order
        got = table.row(i, named=True)
        assert got["kernel"] == want["name"], i
        assert got["op_stack"] == want["op_stack"], i
        assert got["top_level_op"] == want["top_level_op"], i
        assert got["bottom_level_op"] == want["bottom_level_op"], i
        for c in counters:  # HTA's counter column order varies from run to run: compare by name
            assert got[c] == want[c], (i, c)


def test_pairing_matches_kernels_to_the_ops_that_run_them(table: pl.DataFrame) -> None:
    """Independent of HTA: each kernel family lands under the op that runs it."""
    def ops_of(pattern: str) -> set[str]:
        return set(table.filter(pl.col("kernel").str.contains(pattern))["bottom_level_op"])

    assert ops_of("max_pool_forward") == {"aten::max_pool2d_with_indices"}
    assert ops_of("fft2d|gcgemm|xmma|nchwToNhwc") == {"aten::cudnn_convolution"}
    assert ops_of("CUDAFunctor_add") == {"aten::add_"}
    assert table["pairing"].unique().to_list() == ["launch order"]
    assert table["launch_id"].is_sorted() and table["launch_id"].null_count() == 0


def test_flops_from_sass_counters(table: pl.DataFrame) -> None:
    first = table.row(0, named=True)  # aten::rand: 38,731,776 FFMA and 4,866,048 HFMA
    assert first[SASS.format("ffma")] == 38_731_776 and first[SASS.format("hfma")] == 4_866_048
    assert first["flops_fp32"] == 2 * 38_731_776
    assert first["flops_fp16"] == 2 * 4_866_048
    assert first["flops"] == 2 * (38_731_776 + 4_866_048)
    conv = table.row(1, named=True)  # a cuDNN conv kernel: 9,119,334,400 FFMA + 24,780,800 FMUL
    assert conv["flops"] == 2 * 9_119_334_400 + 24_780_800 == 18_263_449_600
    weights = {c: w for c, (_, w) in FLOP_COUNTERS.items()}
    expected = sum(table[c] * w for c, w in weights.items())
    assert (table["flops"] == expected).all()
    assert (table["flops"] == table["flops_fp64"] + table["flops_fp32"] + table["flops_fp16"]).all()
    # No dram__bytes counters were recorded in this trace: unknown, not zero.
    assert table["dram_bytes"].null_count() == table.height


def test_tensor_core_verdict_without_tensor_counters_comes_from_names(table: pl.DataFrame) -> None:
    assert set(table["tc_source"]) == {"name"}
    xmma = table.filter(pl.col("kernel").str.contains("xmma_new"))
    assert xmma.height > 0 and set(xmma["tc"]) == {"yes"}
    assert set(table.filter(pl.col("kernel") == "__missing__")["tc"]) == {"unknown"}


def test_counters_survive_the_cache(tmp_path: Path) -> None:
    path = trace_path(CUPTI)
    first = kinetolens.load(path, cache=tmp_path)
    cached = kinetolens.load(path, cache=tmp_path)
    assert cached.kernel_counters.height == first.kernel_counters.height == 77 * 9
    assert cached.kernel_counters.equals(first.kernel_counters)


def test_truncated_trace_keeps_counters_but_refuses_to_guess_ops(tmp_path: Path) -> None:
    """Cut inside the counter ranges: 35 ranges survive but all 77 launches do,
    so pairing by order would be a guess; the counters stay, the ops do not."""
    text = gzip.decompress(trace_path(CUPTI).read_bytes())
    first, last = text.find(b"cuda_profiler_range"), text.rfind(b"cuda_profiler_range")
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: (first + last) // 2])
    trace = kinetolens.load(cut, cache=False)
    assert any(w.kind == "truncated JSON" for w in trace.warnings)
    t = counter_table(trace)
    assert t.height == 35
    assert t["pairing"][0] == "not paired: 35 counter ranges but 77 kernel launches"
    assert t["op_id"].null_count() == 35 and t["top_level_op"].null_count() == 35
    assert t["flops"].null_count() == 0


def test_trace_without_counters() -> None:
    trace = kinetolens.load(trace_path("hta/triton_example/triton_example.json.gz"))
    assert trace.kernel_counters.height == 0
    with pytest.raises(NoCounters, match="no CUPTI counter values"):
        counter_table(trace)
    # Kernel verdicts still work, from names alone.
    assert set(kernel_tensor_cores(trace)["tc_source"]) <= {"name", "kind"}


# -- CLI ---------------------------------------------------------------------------


def test_cli_csv(capsys: pytest.CaptureFixture[str]) -> None:
    main(["counters", str(trace_path(CUPTI)), "--csv"])
    out = pl.read_csv(capsys.readouterr().out.encode(), infer_schema_length=None)
    assert out.height == 77
    assert out["op_stack"][1] == "aten::conv2d > aten::convolution > aten::_convolution > aten::cudnn_convolution"
    assert out["flops"][1] == 18_263_449_600
    assert SASS.format("ffma") in out.columns


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    main(["counters", str(trace_path(CUPTI)), "--json", "-n", "3"])
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 3
    assert rows[0]["op_stack"] == ["aten::rand", "aten::uniform_"]
    assert rows[0]["top_level_op"] == "aten::rand" and rows[0]["tc"] == "no"


def test_cli_table(capsys: pytest.CaptureFixture[str]) -> None:
    main(["counters", str(trace_path(CUPTI)), "-n", "5", "-w", "200"])
    out = capsys.readouterr().out
    assert "aten::max_pool2d_with_indices" in out
    assert "5 kernels; op stacks: launch order" in out


def test_cli_without_counters_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    path = trace_path("hta/triton_example/triton_example.json.gz")
    with pytest.raises(SystemExit) as exc:
        main(["counters", str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(path) in err and "no CUPTI counter values" in err


def test_tensor_core_counters_override_names() -> None:
    """The sample has no Tensor Core counter; give two of its real ranges one
    (as ``kineto__tensor_core_insts`` records it) and the measured values win
    over the names, per range and per kernel name; ranges without it keep the
    name verdict."""
    trace = kinetolens.load(trace_path(CUPTI))
    c = trace.kernel_counters
    ranges = c.group_by("range_id").agg(pl.col("name").first(), pl.col("pid", "tid", "ts", "dur", "launch_id").first())
    xmma = ranges.filter(pl.col("name").str.contains("xmma_new")).sort("range_id").head(1)
    gcgemm = ranges.filter(pl.col("name") == "ampere_gcgemm_64x64_nt").sort("range_id").head(1)
    assert c.sort("range_id")["ts"].is_sorted()  # so the first range by id is the first row by time
    extra = pl.concat([xmma, gcgemm]).with_columns(
        metric=pl.lit("sm__inst_executed_pipe_tensor.sum"),
        value=pl.Series([0.0, 5.0e6]),  # the opposite of what the names say
    ).select(c.columns)
    trace = dataclasses.replace(trace, kernel_counters=pl.concat([c, extra]))
    t = counter_table(trace)
    by_range = dict(zip(t["idx"], zip(t["tc"], t["tc_source"])))
    xi = t.filter(pl.col("kernel").str.contains("xmma_new"))["idx"][0]
    gi = t.filter(pl.col("kernel") == "ampere_gcgemm_64x64_nt")["idx"][0]
    assert by_range[xi] == ("no", "counters") and by_range[gi] == ("yes", "counters")
    other = t.filter(~pl.col("idx").is_in([xi, gi]))
    assert set(other["tc_source"]) == {"name"}
    verdicts = dict(counter_verdicts(trace).iter_rows())
    assert verdicts["ampere_gcgemm_64x64_nt"] == "yes"


# -- measured beside modeled -------------------------------------------------------

BERT = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"


def with_dram_counters(tmp_path: Path, factor: dict[str, float], rel: str = BERT) -> Path:
    """A copy of a real trace with one ``cuda_profiler_range`` per kernel launch,
    in launch order, carrying ``dram__bytes_read.sum``/``dram__bytes_write.sum``
    (3:1) as Kineto writes them: the modeled bytes of the launch's kernel times
    ``factor[op]`` (1 for other ops; 4 KiB for kernels without a model).

    No trace we have recorded DRAM counters (HTA's CUPTI sample holds SASS
    instruction counters only), so the values are placed by hand; everything
    from the file on (ingest, pairing, the model, the joins) runs for real.
    """
    from kinetolens.analysis.hardware.counters import LAUNCH_API
    from kinetolens.analysis.workload.work import kernel_work

    path = trace_path(rel)
    trace = kinetolens.load(path, cache=False)
    work = kernel_work(trace).join(trace.kernels.select("kernel_id", "launch_id", "name", "op"), on="kernel_id")
    launches = (
        trace.runtime.filter(pl.col("name").str.contains(LAUNCH_API.pattern))
        .sort(["ts", "launch_id"])
        .select("launch_id", "pid", "tid", "ts", "dur")
        .join(trace.kernels.select("launch_id", "name", "op"), on="launch_id", how="left", maintain_order="left")
        .join(work.select("launch_id", "bytes"), on="launch_id", how="left", maintain_order="left")
    )
    events = []
    for r in launches.iter_rows(named=True):
        total = int((r["bytes"] if r["bytes"] is not None else 4096) * factor.get(r["op"], 1.0))
        read = total * 3 // 4
        events.append({
            "ph": "X", "cat": "cuda_profiler_range", "name": r["name"] or "__missing__", "pid": r["pid"], "tid": r["tid"],
            "ts": r["ts"] / 1000.0, "dur": max(r["dur"], 1000) / 1000.0,
            "args": {"dram__bytes_read.sum": read, "dram__bytes_write.sum": total - read},
        })  # fmt: skip
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc["traceEvents"].extend(events)
    out = tmp_path / f"with_counters_{len(list(tmp_path.iterdir()))}.json.gz"
    out.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out


def test_measured_beside_modeled_per_kernel_op_and_group(tmp_path: Path) -> None:
    from kinetolens.analysis.hardware.counters import measured_vs_modeled, op_measured
    from kinetolens.analysis.hardware.roofline import kernel_roofline, op_roofline, roofline_by
    from kinetolens.analysis.hardware.gpu_spec import gpu_spec

    trace = kinetolens.load(with_dram_counters(tmp_path, {"aten::addmm": 6.0}), cache=False)
    assert counter_table(trace)["pairing"][0] == "launch order"
    spec = gpu_spec(trace)
    k = kernel_roofline(trace, spec)
    # Every kernel with a model got its own launch's range: modeled x 6 under addmm, x 1 elsewhere.
    assert k["measured_bytes"].null_count() == 0
    addmm = k.filter(pl.col("op") == "aten::addmm")
    assert addmm.height == 26 and addmm["bytes_ratio"].to_list() == pytest.approx([6.0] * 26, rel=1e-6)
    assert k.filter(pl.col("op") != "aten::addmm")["bytes_ratio"].to_list() == pytest.approx([1.0] * 34, rel=1e-6)
    # Tensor Core GEMMs: their math is not in the SASS fp counters, so no measured FLOPs.
    assert addmm["measured_flops"].null_count() == 26
    ops = op_roofline(trace, spec)
    assert ops.filter(pl.col("name") == "aten::addmm")["bytes_ratio"].to_list() == pytest.approx([6.0] * 26, rel=1e-6)
    by_op = roofline_by(trace, spec, "op")
    row = by_op.filter(pl.col("op") == "aten::addmm").row(0, named=True)
    assert row["bytes_ratio"] == pytest.approx(6.0, rel=1e-6)
    assert row["measured_bytes"] == pytest.approx(6 * row["bytes"], rel=1e-6)
    table = measured_vs_modeled(trace)
    assert table["op"][0] == "aten::addmm" and table["excess_bytes"][0] == pytest.approx(5 * row["bytes"], rel=1e-6)
    assert op_measured(trace).height == ops.height


def test_measured_without_dram_counters_or_model_is_null() -> None:
    from kinetolens.analysis.hardware.counters import kernel_measured, op_measured

    trace = kinetolens.load(trace_path(CUPTI))
    m = kernel_measured(trace)
    assert m.height == 77 and m["measured_bytes"].null_count() == 77  # SASS counters only
    # The first range (aten::uniform_, CUDA cores): fadd + fmul + 2 * ffma over fp32 and fp16.
    assert m["measured_flops"][0] == 2 * (38_731_776 + 4_866_048)
    # Its ops recorded no shapes, so there is nothing modeled to put beside.
    assert op_measured(trace).height == 0
    assert kernel_measured(kinetolens.load(trace_path(BERT))).height == 0


def test_cli_roofline_shows_bytes_ratio(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = with_dram_counters(tmp_path, {"aten::addmm": 6.0})
    main(["roofline", str(path), "-w", "250", "--no-cache"])
    out = capsys.readouterr().out
    header = [line for line in out.splitlines() if line.startswith("┃")]
    assert header[-2].rstrip(" ┃").endswith("bytes") and header[-1].rstrip(" ┃").endswith("ratio")  # "bytes ratio"
    addmm = next(line for line in out.splitlines() if "│ aten::addmm" in line)
    assert addmm.rstrip(" │").endswith(" 6.00")  # three significant figures, as every ratio in a table
    main(["roofline", str(trace_path(BERT)), "-w", "250"])
    assert "ratio" not in capsys.readouterr().out
