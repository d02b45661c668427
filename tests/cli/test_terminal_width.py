"""Terminal output a person reads at a glance: short kernel names, tables that
fit 80 and 120 columns with rows of at most two lines, piped output not
wrapped, numbers with units."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.hardware.kernels import kernel_table
from kinetolens.cli.render import Column, format_column, frame_cells, table_text
from kinetolens.registry.kernel_names import short_kernel_name, short_names
from kinetolens.views import units
from tests.conftest import trace_path

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
QWEN_MI300 = "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
NSFW_MI300 = "tracelens/mi300/Falconsai_nsfw_image_detection__1016002.json.gz"
RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
CONTROL = "hta/trace_diff/control/control.json.gz"
TEST = "hta/trace_diff/test/test.json.gz"
B300_DECODE = "tracelens/b300/qwen3_30b_a3b_decode/1782799835.6885648-TP-0-DECODE.trace.json.gz"


def cli(*args: str, columns: int | None) -> str:
    """The CLI in a real subprocess writing to a pipe; ``columns`` as ``COLUMNS`` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    proc = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def body(out: str) -> list[str]:
    """The lines of the first table after its header rule, up to its caption or the next table."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() and set(line.strip()) <= {"─", "━", " "}) + 1
    rows = []
    for line in lines[start:]:
        if not line.strip() or line.startswith(("not shown at this width", "more columns with")):
            break
        rows.append(line)
    return rows


# -- short kernel names --------------------------------------------------------------


# short names of real CUDA (H100, V100) and ROCm (MI300) kernel names
EXPECTED_SHORT = {
    # template noise and argument lists dropped, the functor kept
    "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, at::detail::Array<char*, 3> >"
    "(int, at::native::AddFunctor<float>, at::detail::Array<char*, 3>)": "vectorized_elementwise_kernel<AddFunctor<float>>",
    # a lambda is named by the function it is in
    "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda(float)#1}, std::array<char*, 2ul>)": "vectorized_elementwise_kernel<bfloat16_copy_kernel_cuda>",
    # cuBLAS / cuDNN / MIOpen names without a signature stay whole
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas":
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "volta_scudnn_128x64_relu_interior_nn_v1": "volta_scudnn_128x64_relu_interior_nn_v1",
    "Memcpy DtoH (Device -> Pinned)": "Memcpy DtoH (Device -> Pinned)",
    # library namespaces and template arguments kept, the argument list dropped
    "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams"
    "<float, float>)": "cudnn::winograd_nonfused::winogradForwardData4x4<float, float>",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)":
    "cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>",
}


@pytest.mark.parametrize("rel", [QWEN, RESNET, QWEN_MI300, NSFW_MI300])
def test_short_names_of_real_kernels(rel: str) -> None:
    # the kernels view's short_name column, over every distinct name of real traces
    table = kernel_table(kinetolens.load(trace_path(rel)))
    pairs = dict(table.select("kernel", "short_name").unique().iter_rows())
    assert len(pairs) > 10
    for raw, short in pairs.items():
        assert short == short_kernel_name(raw)
        assert 0 < len(short) <= len(raw)
        assert not short.startswith("void ") and "at::native::" not in short and "(anonymous namespace)" not in short
        if raw.startswith("void "):  # a C++ signature: no argument list left
            assert not short.endswith(")"), short
        assert len(short) <= 130, short  # the longest raw names run to 850 characters
    for raw, short in EXPECTED_SHORT.items():
        if raw in pairs:
            assert pairs[raw] == short
    # names kept whole
    assert all(pairs[n] == n for n in pairs if n.startswith(("Memcpy", "Memset", "sm90_xmma", "igemm_", "volta_")))
    if "mi300" in rel:  # Tensile GEMMs: cut after the macro and instruction tiles
        tensile = [s for r, s in pairs.items() if r.startswith("Cijk_")]
        assert tensile and all(re.fullmatch(r"Cijk_\w+_MT\d+x\d+x\d+_MI\d+x\d+x\d+", s) for s in tensile), tensile


def test_expected_short_names() -> None:

    for raw, short in EXPECTED_SHORT.items():
        assert short_kernel_name(raw) == short
    series = pl.Series(list(EXPECTED_SHORT) * 3 + [None])
    assert short_names(series).to_list() == list(EXPECTED_SHORT.values()) * 3 + [None]


# -- tables fit 80 and 120 columns ---------------------------------------------------------

COMMANDS = {
    "kernels-qwen": ["kernels", QWEN, "-n", "15", "--step", "6"],
    "kernels-resnet": ["kernels", RESNET, "-n", "15"],
    "kernels-mi300": ["kernels", QWEN_MI300, "-n", "15"],
    "ops-qwen": ["ops", QWEN],
    "ops-resnet": ["ops", RESNET],
    "ops-kernel": ["ops", QWEN, "--aggregate-by", "kernel"],
    "summary-qwen": ["summary", QWEN],
    "summary-resnet": ["summary", RESNET],
    "summary-b300-decode": ["summary", B300_DECODE],
    "phases-b300-decode": ["phases", B300_DECODE],
    "diff": ["diff", CONTROL, TEST],
    "diff-kernel": ["diff", CONTROL, TEST, "-l", "kernel"],
}


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_tables_fit_the_width(name: str, width: int) -> None:
    # no line wider than COLUMNS; before, kernels at 80 columns took 1,281 lines for 15 rows
    args = [str(trace_path(a)) if a.endswith(".gz") else a for a in COMMANDS[name]]
    out = cli(*args, columns=width)
    too_wide = [line for line in out.splitlines() if len(line.rstrip()) > width]
    assert not too_wide, too_wide[:3]
    if args[0] == "kernels":
        rows = body(out)
        starts = [i for i, line in enumerate(rows) if re.match(r"\s*\d+\s", line)]
        assert len(starts) == 15
        assert all(b - a <= 2 for a, b in zip(starts, [*starts[1:], len(rows)])), "a row took more than two lines"
    if args[0] == "ops":
        assert len(body(out)) <= 2 * 20
    lines = [line.replace("│", " ").replace("┃", " ").rstrip() for line in out.splitlines()]
    if args[0] == "summary" and "Step time breakdown" in out:  # the what / value table: a value's second line has no key
        block = lines[: next(i for i, line in enumerate(lines) if "Step time breakdown" in line)]
        assert longest_run(block, lambda line: bool(re.match(r"\s{10,}\S", line))) <= 1
    if "Engine iterations" in out:  # a number is never cut: 8,721… us, "dec…" (rich's own tables did)
        for title in ("Engine iterations", "Phases (% of"):
            start = next(i for i, line in enumerate(lines) if line.startswith(title))
            table = body("\n".join(lines[start:]))
            assert table and not any("…" in line for line in table), table
            assert re.match(r"\s*(0\s+)?decode\s+1?\s*8,721", table[0]), table
    if args[0] == "diff":  # every row's first line has its status
        start = next(i for i, line in enumerate(lines) if re.match(r"(op|kernel) per step", line.strip()))
        rows = body("\n".join(lines[start:]))
        statuses = re.compile(r"\s(new|gone|changed|same|appeared|disappeared)\s")
        assert len(rows) > 5 and longest_run(rows, lambda line: not statuses.search(line + " ")) <= 1


def longest_run(lines: list[str], continues: object) -> int:
    """The most consecutive lines for which ``continues`` holds (a row's lines after its first)."""
    best = run = 0
    for line in lines:
        run = run + 1 if continues(line) else 0  # type: ignore[operator]
        best = max(best, run)
    return best


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("rel", [QWEN, RESNET])
def test_every_cell_is_at_most_two_lines(rel: str, width: int) -> None:
    # the renderer itself, on the whole kernels table of a real trace
    frame = kernel_table(kinetolens.load(trace_path(rel))).select(
        "idx", "step", "dir", "module", "op", "short_name", "params", "dur_us", "tc", "stream", "source"
    )
    table, dropped = table_text(frame, width=width)
    for column in table.columns:
        for cell in [column.header, *column._cells]:
            lines = str(getattr(cell, "plain", cell)).split("\n")
            assert len(lines) <= 2 and all(len(line) <= (column.max_width or width) for line in lines)
    assert sum(c.max_width or 0 for c in table.columns) + 2 * (len(table.columns) - 1) <= width
    assert "idx" not in dropped and "short_name" not in dropped


def test_full_names_and_short_names() -> None:
    # the short form by default, --full-names for the raw name
    path = str(trace_path(RESNET))
    short = cli("kernels", path, "-n", "40", "-c", "idx,short_name", columns=None)
    full = cli("kernels", path, "-n", "40", "-c", "idx,short_name", "--full-names", columns=None)
    assert "vectorized_elementwise_kernel<AddFunctor<float>>" in short and "at::native::" not in short
    assert "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>" in full


# -- piped output --------------------------------------------------------------------------


def test_piped_output_is_not_wrapped() -> None:
    # `kinetolens ops T | less` used rich's default 80 columns and split headers
    path = str(trace_path(QWEN))
    out = cli("kernels", path, "-n", "15", "--step", "6", columns=None)
    rows = body(out)
    assert len(rows) == 15  # one line per row
    header = out.splitlines()[0]
    assert re.search(r"\bdur us\b", header) and "fwd op" in header  # headers whole, on one line
    ops = cli("ops", path, "-t", "10", columns=None)
    assert len(body(ops)) == 10
    assert any(len(line) > 80 for line in ops.splitlines())


# -- numbers -------------------------------------------------------------------------------


def test_units() -> None:
    # numbers with units a person reads
    assert units.flops(3_093_603_287_040.0) == "3.09 TFLOP"
    assert units.traffic(33.8e9) == "33.8 GB"
    assert units.percent(0.555) == "55.5%"
    assert units.memory(2.60 * 2**30) == "2.60 GiB"
    assert units.memory(34_000_779_264) == "31.7 GiB"
    assert units.duration(18.112) == "18.1 us" and units.duration(3093.6) == "3,094 us"
    assert units.duration(30_936.0) == "30.9 ms" and units.duration(12_000_000) == "12.0 s"
    assert units.count(10.0) == "10" and units.count(1024) == "1,024"
    assert units.middle("model.layers.0.self_attn.q_proj", 15) == "model.l….q_proj"


def _column(name: str, values: list[float]) -> Column:
    return format_column(frame_cells(pl.DataFrame({name: values}))[0])


def test_columns_carry_their_unit() -> None:
    # counts as integers, times in the unit that fits with the unit in the header
    calls = _column("calls", [10.0, 3.0])
    assert calls.cells == ["10", "3"]
    times = _column("device_total_us", [12_790.0, 53.1])
    assert times.header == "device total ms" and times.cells == ["12.790", "0.053"]
    flops = _column("flops", [3_093_603_287_040.0])
    assert flops.cells == ["3.09 TFLOP"]
    assert _column("tflops_s", [12.4]).header == "TFLOP/s"


def test_a_float_column_takes_one_number_of_decimals_past_nulls_and_nan() -> None:
    # four significant figures of the largest finite value, for every row; a
    # null or NaN neither sets the decimals nor breaks the column
    col = _column("ratio", [1946.0, 66.35, None, float("nan"), 1.523])
    assert col.cells == ["1,946", "66", "-", "-", "2"]
    col = _column("ratio", [6.635, None, 0.01523])
    assert col.cells == ["6.635", "-", "0.015"]
    assert _column("ratio", [None, None]).cells == ["-", "-"]


def test_csv_and_json_keep_exact_numbers_without_float_noise() -> None:
    # 18.112, not 18.112000000000002 (the clock ticks in nanoseconds)
    path = str(trace_path(QWEN))
    csv = cli("kernels", path, "--csv", "-c", "idx,dur_us,start_us", columns=None)
    values = [v for line in csv.splitlines()[1:] for v in line.split(",")[1:]]
    assert values and all(len(v.partition(".")[2]) <= 3 for v in values)
    rows = json.loads(cli("kernels", path, "--json", "-c", "idx,dur_us", "-n", "5", columns=None))
    assert rows[0]["dur_us"] == 18.112


# a name longer than its cell is cut in the middle on one line, never
# folded mid-word (at 80 columns, `max_pool_forward_nchw<float` + a line holding only `>`)
@pytest.mark.parametrize("rel", [QWEN, RESNET])
def test_names_are_cut_in_the_middle_not_folded(rel: str) -> None:
    path = str(trace_path(rel))
    rows = json.loads(cli("kernels", path, "-n", "40", "--json", columns=None))
    out = cli("kernels", path, "-n", "40", "-c", "idx,op,short_name,dur_us", columns=80)
    lines = body(out)
    starts = {int(line.split()[0]): i for i, line in enumerate(lines) if line[:5].strip().isdigit()}
    cut = 0
    for row in rows:
        i = starts[row["idx"]]
        cells = re.split(r"\s{2,}", lines[i].strip())
        assert len(cells) == 4, lines[i]
        for name, cell in ((row["op"], cells[1]), (row["short_name"], cells[2])):
            if " " in name:
                continue
            if cell != name:
                head, _, tail = cell.partition(units.ELLIPSIS)
                assert tail and name.startswith(head) and name.endswith(tail), (name, cell)
                cut += 1
        if " " not in row["op"] + row["short_name"]:  # nothing of this row on a second line
            assert i + 1 == len(lines) or lines[i + 1][:5].strip().isdigit(), lines[i : i + 2]
    assert cut > 0  # 80 columns are too narrow for some names of both traces


# the one cell rule, on real kernel names at every width
def test_fit_cell_on_real_names() -> None:
    from kinetolens.cli.render import fit_cell

    names = set(kernel_table(kinetolens.load(trace_path(RESNET)))["short_name"].to_list())
    names |= {"aten::max_pool2d_with_indices", "Memcpy HtoD (Pageable -> Device)", "   model.layers.0.self_attn"}
    for name in names:
        for width in range(8, 61):
            text = fit_cell(name, width)
            parts = text.split("\n")
            assert len(parts) <= 2 and all(len(p) <= width for p in parts), (name, width, text)
            if " " not in name.strip() and len(name) > width:
                assert text == units.middle(name, width)
            elif len(parts) == 2 and units.ELLIPSIS not in text:  # wrapped at a space, nothing lost
                assert " ".join(p.strip() for p in parts) == " ".join(name.split())


# `dist` fits 80 and 120 columns through the shared renderer: numbers are
# never cut ("797,7…" bytes, "colle…" headers before), bytes carry units
@pytest.mark.parametrize("width", [80, 120])
def test_dist_fits_the_width_with_whole_numbers(tmp_path, width: int) -> None:  # type: ignore[no-untyped-def]
    from tests.dashboard_helpers import RANKS

    for i, rel in enumerate(RANKS):
        (tmp_path / f"rank-{i}.pt.trace.json.gz").symlink_to(trace_path(rel))
    out = cli("dist", str(tmp_path), "--no-cache", "--executor", "local:1", columns=width)
    assert all(len(line) <= width for line in out.splitlines()), out
    assert not re.search(r"\d" + units.ELLIPSIS + "|" + units.ELLIPSIS + r"\d", out), out
    collectives = out.split("collectives (per rank", 1)[1]
    assert "798 MB" in collectives  # regression pin: all_to_all's 797,745,152 bytes per rank
    assert "yes" not in out  # no rank of this run is a straggler


# at 80 columns the row's name keeps room to be read (`aten::…orward` in 14
# columns before): a number column is left out (and named) first
def test_names_keep_room_at_80_columns() -> None:
    from kinetolens.cli.render import MIN_KEY

    out = cli("ops", str(trace_path(QWEN)), "-t", "10", columns=80)
    names = [re.split(r"\s{2,}", line.strip())[0] for line in body(out)]
    assert len(names) == 10
    assert all(units.ELLIPSIS not in n or len(n) >= MIN_KEY for n in names), names
    assert "aten::_flas…on_forward" in names  # regression pin: the flash-attention op, cut in the middle
    assert "not shown at this width" in out


# a table's title is not folded at the table's width: the summary's trace
# path stays whole on its line at 80 columns (it was cut to '...1074.pt.trace' + '.json.gz'),
# and is cut in the middle only where the terminal is narrower than the path
@pytest.mark.parametrize("width", [60, 80])
def test_title_path_is_not_folded(width: int) -> None:
    path = str(trace_path("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"))
    lines = cli("summary", path, columns=width).splitlines()
    assert all(len(line) <= width for line in lines)
    shown = [line.strip() for line in lines[:3] if "rank-34" in line or units.ELLIPSIS in line]
    assert len(shown) == 1
    assert shown[0] == (path if len(path) <= width else units.middle(path, width))


# one explanation, one note: the CPU and GPU peaks of the V100 trace both
# carry "allocated while profiling only" and printed the same note twice as [1] and [2]
def test_summary_notes_are_not_repeated() -> None:
    out = cli("summary", str(trace_path(RESNET)), columns=80)
    notes = [line for line in out.splitlines() if re.match(r"\[\d+\] ", line)]
    assert notes and len(notes) == len({n.split("] ", 1)[1] for n in notes})
    assert "[2]" not in out
