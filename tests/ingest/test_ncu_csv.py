"""Nsight Compute's raw CSV page, as ncu 2025.3 wrote it on an H200
(``tests/data/gpu/ncu_step.ncu.csv.gz``: one training step, 90 kernels)."""

from __future__ import annotations

import csv
import gzip
import io
import subprocess
import sys
from pathlib import Path

import pytest

from kinetolens.capture.counter_presets import NCU_ROOFLINE_METRICS
from kinetolens.errors import TraceError
from kinetolens.ingest.ncu_csv import read_ncu_csv, unit_factor

NCU_CSV = Path(__file__).resolve().parents[1] / "data" / "gpu" / "ncu_step.ncu.csv.gz"


def _rows() -> list[list[str]]:
    return list(csv.reader(io.StringIO(gzip.decompress(NCU_CSV.read_bytes()).decode())))


def _write(tmp_path: Path, rows: list[list[str]], preamble: str = "") -> Path:
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    path = tmp_path / "step.csv"
    path.write_text(preamble + out.getvalue())
    return path


def test_the_recorded_csv_reads_as_kernels_and_metrics() -> None:
    # every profiled kernel in ID order, each metric asked for, values without separators
    got = read_ncu_csv(NCU_CSV)
    rows = _rows()
    header, kernels = rows[0], rows[2:]
    assert got.frame.height == len(kernels) == 90
    assert got.frame["ncu_id"].to_list() == list(range(90))
    assert set(NCU_ROOFLINE_METRICS) <= set(got.metrics)
    col = header.index("dram__bytes_read.sum")
    assert any("," in r[col] for r in kernels)  # thousands separators in the file
    assert got.frame["dram__bytes_read.sum"].to_list() == [float(r[col].replace(",", "")) for r in kernels]
    first = kernels[0]
    assert got.frame.row(0, named=True)["kernel"] == first[header.index("Kernel Name")]
    dims = [int(x) for x in first[header.index("Grid Size")].strip("()").split(",")]
    assert [got.frame[f"grid_{a}"][0] for a in "xyz"] == dims
    # the machine's attributes and the min/max rollups are not per-kernel counters
    assert not [m for m in got.metrics if m.startswith("device__attribute_") or m.endswith((".min", ".max"))]
    assert "dram__bytes_read.avg" not in got.metrics and "dram__bytes_read.sum" in got.metrics


def test_scaled_units_come_back_to_base_units(tmp_path: Path) -> None:
    # ncu without --print-units base writes Kbyte and usecond: the values read the same
    rows = _rows()
    header = rows[0]
    scaled = [list(r) for r in rows]
    for name, unit, factor in (("dram__bytes_read.sum", "Kbyte", 1e3), ("gpu__time_duration.sum", "usecond", 1e3)):
        c = header.index(name)
        scaled[1][c] = unit
        for r in scaled[2:]:
            r[c] = repr(float(r[c].replace(",", "")) / factor)
    base = read_ncu_csv(NCU_CSV).frame
    got = read_ncu_csv(_write(tmp_path, scaled)).frame
    for name in ("dram__bytes_read.sum", "gpu__time_duration.sum"):
        assert got[name].to_list() == pytest.approx(base[name].to_list(), rel=1e-12)
    assert unit_factor("Mbyte/second") == 1e6 and unit_factor("msecond") == 1e6 and unit_factor("%") == 1.0


def test_lines_ncu_printed_before_the_table_are_skipped(tmp_path: Path) -> None:
    # `ncu --csv ... > file` keeps ==PROF== lines and the program's output above the header
    path = _write(tmp_path, _rows(), preamble="==PROF== Connected to process 42\nstep done\n")
    assert read_ncu_csv(path).frame.equals(read_ncu_csv(NCU_CSV).frame)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\x89NCU-REP\x00\x01\x02binary", "an .ncu-rep report?"),
        (b'"Kernel","Duration"\n"k","1"\n', "no ID and Kernel Name columns"),
        (b'"ID","Kernel Name","Process ID"\n"","",""\n', "without the column(s) Device"),
    ],
    ids=["ncu-rep", "other-csv", "missing-columns"],
)
def test_what_is_not_an_ncu_csv_is_one_line_naming_the_file(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "counters.csv"
    path.write_bytes(content)
    with pytest.raises(TraceError) as err:
        read_ncu_csv(path)
    assert problem in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_csv_without_kernels_is_refused(tmp_path: Path) -> None:
    rows = _rows()
    with pytest.raises(TraceError, match="without a profiled kernel"):
        read_ncu_csv(_write(tmp_path, rows[:2]))


def test_the_cli_refuses_a_bad_csv_with_exit_2(tmp_path: Path) -> None:
    trace = NCU_CSV.with_name("ncu_step.pt.trace.json.gz")
    bad = tmp_path / "report.ncu-rep"
    bad.write_bytes(b"\x00\x01binary report")
    res = subprocess.run([sys.executable, "-m", "kinetolens.cli.main", "counters", str(trace), "--ncu", str(bad), "--no-cache"],
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert str(bad) in res.stderr and "Traceback" not in res.stderr


def test_a_csv_cut_short_keeps_its_complete_rows(tmp_path: Path) -> None:
    # a copy that stopped mid-row: the complete rows load, with a counted warning
    text = gzip.decompress(NCU_CSV.read_bytes()).decode()
    path = tmp_path / "cut.csv"
    path.write_text(text[: len(text) // 2])
    got = read_ncu_csv(path)
    whole = read_ncu_csv(NCU_CSV).frame
    assert 0 < got.frame.height < whole.height
    assert got.frame.equals(whole.head(got.frame.height))
    assert [(w.kind, w.count) for w in got.warnings] == [("Nsight Compute rows cut off", 1)]


def test_two_reports_in_one_file_are_refused(tmp_path: Path) -> None:
    # repeated kernel IDs would pair the second report's kernels with the first's
    rows = _rows()
    with pytest.raises(TraceError, match="repeating 90 kernel IDs"):
        read_ncu_csv(_write(tmp_path, rows + rows[2:]))


def test_the_roofline_metrics_leave_fp8_out_before_its_tensor_cores() -> None:
    # ncu refuses a metric the GPU lacks: no FP8 Tensor Core path before compute capability 8.9
    from kinetolens.capture.counter_presets import ncu_roofline_metrics

    assert ncu_roofline_metrics((9, 0)) == NCU_ROOFLINE_METRICS
    older = ncu_roofline_metrics((8, 0))
    assert "sm__ops_path_tensor_src_fp8.sum" not in older and len(older) == len(NCU_ROOFLINE_METRICS) - 1
