"""CUPTI PM-sampling counters: Kineto's ``hardware_counters`` counter tracks
read back, spread over the kernels they overlap, and shown by
``kinetolens counters``.

The samples are written into a real GPU trace exactly as Kineto's JSON writer
(``ChromeTraceLogger::handleCounterEvent``) writes them: one ``ph: "C"``
event per metric and sample, category ``hardware_counters``, the process
named ``"GPU <device> Counters"`` instead of a number, the value under the
empty key ``""``, and only the sample's start time.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.hardware.pm_sampling import (
    NoSamples,
    pm_by_kernel_name,
    pm_per_kernel,
    pm_samples,
    sample_info,
)
from kinetolens.cli.main import main

from tests.conftest import trace_path

BASE = "hta/with_gpu_user_annotation/step_based_trace_2543932.json.gz"
SM = "sm__cycles_active.avg"
DRAM = "dram__bytes_read.sum"


def kineto_counter_event(metric: str, device: int, ts_us: float, value: float) -> str:
    """One sample of one metric, laid out as Kineto writes it."""
    return (
        "\n  {\n"
        '    "ph": "C",\n'
        '    "cat": "hardware_counters",\n'
        f'    "name": "{metric}",\n'
        f'    "pid": "GPU {device} Counters",\n'
        '    "tid": 0,\n'
        f'    "ts": {ts_us},\n'
        '    "args": {\n'
        f'      "": {value}\n'
        "    }\n"
        "  },"
    )


def _kernel_span(events: list[dict]) -> tuple[int, int]:
    kernels = [e for e in events if e.get("cat") == "kernel"]
    return min(e["ts"] for e in kernels), max(e["ts"] + e["dur"] for e in kernels)


def with_samples(out: Path, interval_us: int) -> tuple[Path, list[tuple[str, int, float]]]:
    """The base trace with two metrics sampled every ``interval_us`` over its
    kernels: ``sm`` counts up by one per sample, ``dram`` is the sample's
    start time in ms.  Returns the file and the samples (metric, start, value)."""
    doc = json.loads(gzip.open(trace_path(BASE)).read())
    lo, hi = _kernel_span(doc["traceEvents"])
    samples: list[tuple[str, int, float]] = []
    for i, ts in enumerate(range(lo - interval_us // 2, hi + interval_us, interval_us)):
        samples.append((SM, ts, float(i)))
        samples.append((DRAM, ts, ts / 1e3))
    text = json.dumps(doc)
    head, marker, tail = text.partition('"traceEvents": [')
    assert marker
    counters = "".join(kineto_counter_event(m, 0, ts, v) for m, ts, v in samples)
    out.write_text(head + marker + counters + tail)
    return out, samples


def brute_force(trace: kinetolens.Trace, samples: list[tuple[str, int, float]], interval_us: int) -> dict:
    """Each kernel's overlap-weighted mean per metric, by a plain double loop."""
    by_metric: dict[str, list[tuple[int, int, float]]] = {}
    for metric, ts, value in samples:
        by_metric.setdefault(metric, []).append((ts * 1000, value))  # type: ignore[arg-type]
    spans: dict[str, list[tuple[int, int, float]]] = {}
    for metric, rows in by_metric.items():
        rows.sort()
        spans[metric] = [
            (ts, rows[i + 1][0] if i + 1 < len(rows) else ts + interval_us * 1000, v) for i, (ts, v) in enumerate(rows)
        ]
    want: dict[int, dict[str, float]] = {}
    for k in trace.kernels.filter(pl.col("kind") == "kernel").iter_rows(named=True):
        start, end = k["ts"], k["ts"] + k["dur"]
        for metric, rows in spans.items():
            weight = total = 0.0
            for s_ts, s_end, value in rows:
                overlap = min(end, s_end) - max(start, s_ts)
                if overlap > 0:
                    weight += overlap
                    total += overlap * value
            if weight > 0:
                want.setdefault(k["kernel_id"], {})[metric] = total / weight
    return want


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, int, float]]]:
    return with_samples(tmp_path_factory.mktemp("pm") / "trace.json", interval_us=50)


def test_samples_read_with_their_gpu_and_span(sampled: tuple[Path, list]) -> None:
    path, written = sampled
    trace = kinetolens.load(path, cache=False)
    samples = pm_samples(trace)
    assert samples.height == len(written)
    assert samples["device"].unique().to_list() == [0]  # from the track's name, "GPU 0 Counters"
    sm = samples.filter(pl.col("metric") == SM)
    assert sm["value"].to_list() == [float(i) for i in range(sm.height)]
    # each sample lasts until the next; the last one the median interval (50 us)
    assert (sm["end"] - sm["ts"]).unique().to_list() == [50_000]
    info = sample_info(samples)
    assert info.metrics == (DRAM, SM) and info.devices == (0,)
    assert info.samples == sm.height and info.interval_ns == 50_000
    # the other counter tracks of the file are not samples
    assert trace.counters.filter(pl.col("cat") != "hardware_counters")["device"].null_count() == (
        trace.counters.filter(pl.col("cat") != "hardware_counters").height
    )


def test_each_kernel_gets_the_overlap_weighted_mean_of_its_samples(sampled: tuple[Path, list]) -> None:
    path, written = sampled
    trace = kinetolens.load(path, cache=False)
    per_kernel = pm_per_kernel(trace)
    want = brute_force(trace, written, 50)
    assert per_kernel.height == len(want) == trace.kernels.filter(pl.col("kind") == "kernel").height
    for row in per_kernel.iter_rows(named=True):
        for metric in (SM, DRAM):
            assert row[metric] == pytest.approx(want[row["kernel_id"]][metric], rel=1e-12), (row["kernel_id"], metric)
        assert row["covered"] == row["dur"]  # samples cover the whole span: every kernel is fully covered
    # Some kernels straddle a sample boundary, so a mean of two samples, not a sample's own value.
    straddling = per_kernel.filter(pl.col(SM) != pl.col(SM).floor())
    assert straddling.height > 0


def test_a_kernel_inside_one_sample_gets_that_sample(sampled: tuple[Path, list]) -> None:
    path, written = sampled
    trace = kinetolens.load(path, cache=False)
    per_kernel = pm_per_kernel(trace)
    sm_starts = sorted(ts * 1000 for m, ts, _ in written if m == SM)
    inside = per_kernel.filter(
        pl.col("ts").map_elements(
            lambda ts: next(i for i, s in enumerate(sm_starts) if s > ts) - 1, return_dtype=pl.Int64
        ).alias("sample")
        == (pl.col("ts") + pl.col("dur") - 1).map_elements(
            lambda end: next(i for i, s in enumerate(sm_starts) if s > end) - 1, return_dtype=pl.Int64
        )
    )
    assert inside.height > 10
    for row in inside.iter_rows(named=True):
        sample = max(i for i, s in enumerate(sm_starts) if s <= row["ts"])
        assert row[SM] == sample  # sm's value is the sample's index


def test_kernel_names_weighted_by_time(sampled: tuple[Path, list]) -> None:
    path, _ = sampled
    per_kernel = pm_per_kernel(kinetolens.load(path, cache=False))
    names = pm_by_kernel_name(per_kernel)
    assert names["kernels"].sum() == per_kernel.height
    assert names["time_us"].sum() == pytest.approx(per_kernel["dur"].sum() / 1e3)
    assert names["time_us"].is_sorted(descending=True)
    top = names.row(0, named=True)
    rows = per_kernel.filter(pl.col("name") == top["name"])
    assert top[SM] == pytest.approx((rows[SM] * rows["covered"]).sum() / rows["covered"].sum())
    assert names["covered_pct"].max() <= 100.0 + 1e-9


def test_kineto_interval_of_a_millisecond(tmp_path: Path) -> None:
    """Kineto samples every millisecond: kernels far shorter than a sample
    share one sample's value, and the last sample lasts the median interval."""
    path, written = with_samples(tmp_path / "ms.json", interval_us=1000)
    trace = kinetolens.load(path, cache=False)
    info = sample_info(pm_samples(trace))
    assert info.interval_ns == 1_000_000
    per_kernel = pm_per_kernel(trace)
    want = brute_force(trace, written, 1000)
    for row in per_kernel.iter_rows(named=True):
        assert row[DRAM] == pytest.approx(want[row["kernel_id"]][DRAM], rel=1e-12)


def test_a_trace_without_samples_says_so() -> None:
    with pytest.raises(NoSamples, match="PM-sampling"):
        pm_per_kernel(kinetolens.load(trace_path(BASE), cache=False))


def test_counters_command_shows_kernel_names_and_what_was_sampled(
    sampled: tuple[Path, list], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = sampled
    for width in ("80", "120"):
        main(["counters", str(path), "--no-cache", "-w", width])
        out = capsys.readouterr().out
        lines = out.splitlines()
        assert max(len(line) for line in lines) <= int(width), out
        text = " ".join(out.split())
        assert "CUPTI PM sampling on GPU 0: 2 metrics" in text
        assert "every 50" in text and "us" in text  # the interval, with its unit
        # every metric is shown, its name as spelled (on two lines), before the kernel counts and times
        assert all(part in text for part in ("sm__", "cycles_active.avg", "dram__", "bytes_read.sum"))
        assert " TB" in text  # byte counters read with their unit


def test_counters_command_json_and_samples(sampled: tuple[Path, list], capsys: pytest.CaptureFixture[str]) -> None:
    path, written = sampled
    main(["counters", str(path), "--no-cache", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert rows and {SM, DRAM, "kernel_id", "covered"} <= set(rows[0])
    main(["counters", str(path), "--no-cache", "--samples", "--csv"])
    samples = pl.read_csv(capsys.readouterr().out.encode())
    assert samples.height == len(written) and samples.columns == ["device", "metric", "ts", "end", "value"]


def test_samples_flag_on_a_trace_without_them_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["counters", str(trace_path(BASE)), "--no-cache", "--samples"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "PM sampling" in err[0]


def test_the_gpu_suites_check_passes_on_kinetos_format_and_fails_without_samples(tmp_path: Path) -> None:
    """tests/gpu/checks.check_pm_samples, which the GPU run records against,
    holds on samples as Kineto writes them and fails on a trace without."""
    from tests.gpu.checks import PM_METRICS, check_pm_samples

    assert set(PM_METRICS) == {SM, DRAM}
    path, _ = with_samples(tmp_path / "ms.json", interval_us=1000)
    got = check_pm_samples(kinetolens.load(path, cache=False))
    assert got["interval_ns"] == 1_000_000 and got["covered"] == pytest.approx(1.0)
    with pytest.raises(AssertionError):
        check_pm_samples(kinetolens.load(trace_path(BASE), cache=False))


def test_counters_command_columns(sampled: tuple[Path, list], capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = sampled
    main(["counters", str(path), "--no-cache", "-w", "80", "-c", f"kernel,{SM}"])
    out = capsys.readouterr().out
    header = " ".join(out.split("─")[0].split())
    assert "sm__" in header and "dram__" not in header and "time" not in header
    with pytest.raises(SystemExit) as exit_:
        main(["counters", str(path), "--no-cache", "-c", "nope"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown column(s) nope" in err[0]


def test_each_gpus_samples_go_to_its_own_kernels(tmp_path: Path) -> None:
    """Kineto samples one GPU per track: another GPU's samples (here GPU 1,
    where this trace ran nothing) change no kernel of GPU 0."""
    path, written = with_samples(tmp_path / "two.json", interval_us=50)
    text = path.read_text()
    head, marker, tail = text.partition('"traceEvents": [')
    other = "".join(kineto_counter_event(SM, 1, ts, 1e6) for m, ts, _ in written if m == SM)
    path.write_text(head + marker + other + tail)
    trace = kinetolens.load(path, cache=False)
    info = sample_info(pm_samples(trace))
    assert info.devices == (0, 1)
    per_kernel = pm_per_kernel(trace)
    want = brute_force(trace, written, 50)
    assert set(per_kernel["device"].unique()) == {0}
    for row in per_kernel.iter_rows(named=True):
        assert row[SM] == pytest.approx(want[row["kernel_id"]][SM], rel=1e-12)
