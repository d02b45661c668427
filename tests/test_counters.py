"""CUPTI counters per kernel: HTA's golden frame, derived FLOPs, the CLI."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.counters import FLOP_COUNTERS, NoCounters, counter_table
from kinetolens.analysis.tensor_cores import counter_verdicts, kernel_tensor_cores
from kinetolens.cli.main import main

from .conftest import GOLDEN, trace_path

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
    ranges = c.group_by("range_id").agg(pl.col("name").first(), pl.col("pid", "tid", "ts", "dur").first())
    xmma = ranges.filter(pl.col("name").str.contains("xmma_new")).sort("range_id").head(1)
    gcgemm = ranges.filter(pl.col("name") == "ampere_gcgemm_64x64_nt").sort("range_id").head(1)
    assert c.sort("range_id")["ts"].is_sorted()  # so the first range by id is the first row by time
    extra = pl.concat([xmma, gcgemm]).with_columns(
        metric=pl.lit("sm__inst_executed_pipe_tensor.sum"),
        value=pl.Series([0.0, 5.0e6]),  # the opposite of what the names say
    ).select(c.columns)
    trace.kernel_counters = pl.concat([c, extra])
    t = counter_table(trace)
    by_range = dict(zip(t["idx"], zip(t["tc"], t["tc_source"])))
    xi = t.filter(pl.col("kernel").str.contains("xmma_new"))["idx"][0]
    gi = t.filter(pl.col("kernel") == "ampere_gcgemm_64x64_nt")["idx"][0]
    assert by_range[xi] == ("no", "counters") and by_range[gi] == ("yes", "counters")
    other = t.filter(~pl.col("idx").is_in([xi, gi]))
    assert set(other["tc_source"]) == {"name"}
    verdicts = dict(counter_verdicts(trace).iter_rows())
    assert verdicts["ampere_gcgemm_64x64_nt"] == "yes"
