"""Idle time, kernel types, launches, queue length and copy bandwidth against
HolisticTraceAnalysis (HTA) 0.5.0's figures in ``golden/hta``.

Two views of each trace are checked:

* **HTA's view** reproduces the three things HTA does to its input before any
  analysis, so the *algorithms* can be compared figure by figure:
  1. it reads µs timestamps as float64, then rounds ``ts`` up and ``ts + dur``
     down to whole µs (sub-µs kernels shrink by up to 2 µs, some to -1 µs);
  2. every event with a ``stream`` arg counts as GPU work, including
     ``cuda_sync`` waits (Context Sync as stream 4294967295), CPU ops that
     carry a stream arg (Triton launchers) and MTIA's device-side event waits
     and records;
  3. launch statistics and queue length only count the launch APIs it names.
  In that view every figure agrees within 1% (exceptions are listed with the
  reason in ``HTA_VIEW_EXCEPTIONS``).
* **Our view** (exact ns, only kernels/memcpy/memset, every launch API):
  on traces written with whole-µs timestamps the figures agree within 1%
  too; where they differ, the test says why and checks our figure.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from kinetolens import load
from kinetolens.analysis.gputime import idle
from kinetolens.analysis.gputime import launch
from kinetolens.analysis.gputime.gpu_streams import stream_work, without_last_step
from kinetolens.cli.main import cli
from kinetolens.model.trace import Trace
from tests.conftest import GOLDEN, TRACES

HTA = GOLDEN / "hta"
REL = 0.01

#: Launch APIs HTA's ``get_cuda_kernel_launch_stats`` counts.
HTA_LAUNCH_CALLS = (
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync",
    "runFunction - job_prep_and_submit_for_execution",
)
#: Launch APIs HTA's queue length counts.
HTA_QUEUE_CALLS = HTA_LAUNCH_CALLS + (
    "cuLaunchKernel", "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipMemcpyAsync", "hipMemsetAsync",
    "hipMemcpyWithStream",
)

#: (golden file fragment, check) -> (looser tolerance or None, why HTA's figure is not
#: reproduced within 1% even in its own view).  None: the figures differ, and must.
HTA_VIEW_EXCEPTIONS: dict[tuple[str, str], tuple[float | None, str]] = {
    ("Qwen", "idle"): (None, ("HTA sorts each stream's kernels with an unstable sort; Qwen has many kernels rounded to "
                             "the same µs, so which one is 'previous' (and so host_wait or other) depends on that order")),
    ("trace_diff__test", "idle"): (None, ("HTA subtracts each kernel's start from the previous one's end, so a kernel "
                                         "overlapping the one before on its stream is a -13 µs gap; an overlap is no idle time")),
    ("b200__eager", "idle"): (None, "HTA counts kernels overlapping on one stream as negative kernel_wait gaps (-3.7 µs)"),
    ("b300__qwen3", "idle"): (None, "HTA counts kernels overlapping on one stream (programmatic dependent launch) as negative gaps"),
    ("trace_file_list", "queue"): (None, ("HTA links a launch to its kernel by the kernel's row number and treats row 0 "
                                          "as 'no link', so the kernel that is the file's first event is not queued")),
    ("critical_path__simple_add", "queue"): (0.02, ("HTA orders an enqueue and a dequeue at the same µs with an unstable sort; "
                                    "two such ties move the mean queue length by 1.1%")),
    ("b300__qwen3", "queue"): (0.05, ("the same unstable sort on stream 37 once rounded to µs: HTA's mean 0.82 lies between "
                                      "enqueue-first (0.86, ours) and dequeue-first (0.78) at the tied µs")),
}
#: Traces with kernels overlapping on one stream, which HTA counts as negative idle gaps.
OVERLAPPING_ON_A_STREAM = ("trace_diff__test", "b200__eager", "b300__qwen3", "b300__moe")
#: Memory bandwidth on ns traces: HTA keeps Kineto's bandwidth for memsets it rounded to 0 or
#: -1 µs, whose end then precedes their start, so it has fewer positive points than the exact series.
MEMSET_ROUNDING_TRACES = ("Qwen", "timesformer")

#: Golden files of several ranks analysed as one directory (each has its own test below).
MULTI_RANK = ("hta__trace_filter.json", "param__dlrm_kineto.json")
GOLDEN_FILES = sorted(
    p.name for p in HTA.glob("*.json")
    if p.name not in MULTI_RANK and json.loads(p.read_text())["calls"]
)


def trace_file(golden_name: str) -> Path:
    rel = golden_name.removesuffix(".json")
    for path in TRACES.rglob("*.json*"):
        if str(path.relative_to(TRACES)).replace("/", "__") == rel:
            return path
    pytest.fail(f"no trace for {golden_name}")


@functools.cache
def golden(name: str) -> dict[str, Any]:
    return json.loads((HTA / name).read_text())


@functools.cache
def loaded(path: Path) -> Trace:
    return load(path)


def hta_rounded(trace: Trace) -> Trace:
    """Times as HTA sees them: float64 µs, ``ceil(ts)``, ``floor(ts + dur)``."""
    def rounded(frame: pl.DataFrame) -> pl.DataFrame:
        ts_f = (pl.col("ts") // 1000).cast(pl.Float64) + (pl.col("ts") % 1000).cast(pl.Float64) / 1000
        end_f = ts_f + pl.col("dur").cast(pl.Float64) / 1000
        ts, end = ts_f.ceil().cast(pl.Int64), end_f.floor().cast(pl.Int64)
        return frame.with_columns(ts=ts * 1000, dur=(end - ts) * 1000)

    return dataclasses.replace(
        trace, kernels=rounded(trace.kernels), runtime=rounded(trace.runtime), ops=rounded(trace.ops),
        steps=rounded(trace.steps),
    )


def stream_arg_events(path: Path, trace: Trace) -> pl.DataFrame:
    """Events HTA also counts as GPU work: ``cuda_sync`` and CPU ops with a ``stream`` arg."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    rows = [
        {"name": e["name"], "stream": int(e["args"]["stream"]), "ts": round(e["ts"] * 1000), "dur": round(e["dur"] * 1000)}
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("cuda_sync", "cpu_op")
        and "stream" in (e.get("args") or {}) and int(e["args"]["stream"]) != -1
    ]
    frame = pl.DataFrame(rows, schema={"name": pl.String, "stream": pl.Int64, "ts": pl.Int64, "dur": pl.Int64})
    return frame.with_columns(kind=pl.lit("kernel").cast(trace.kernels.schema["kind"]))


def hta_view(path: Path, with_stream_args: bool) -> Trace:
    trace = loaded(path)
    waits = trace.device_events.filter(pl.col("kind") == "device_sync")
    if waits.height:
        # MTIA's event waits and records: HTA's kernels, the stream waiting for us.
        launches = trace.runtime.filter(pl.col("correlation").is_not_null()).select("correlation", "launch_id")
        waits = waits.with_columns(pl.lit("kernel").cast(trace.kernels.schema["kind"]).alias("kind")).join(
            launches.unique("correlation"), on="correlation", how="left"
        )
        trace = dataclasses.replace(trace, kernels=pl.concat([trace.kernels, waits], how="diagonal_relaxed").sort("ts"))
    if with_stream_args:
        extra = stream_arg_events(path, trace)
        if extra.height:
            assert without_last_step(trace) is trace, "extra stream events are only added to untrimmed traces"
            trace = dataclasses.replace(trace, kernels=pl.concat([trace.kernels, extra], how="diagonal_relaxed"))
    return without_last_step(hta_rounded(trace))


def our_view(path: Path) -> Trace:
    return without_last_step(loaded(path))


def has_fractional_ts(trace: Trace) -> bool:
    return bool((trace.kernels["ts"] % 1000 != 0).any())


# --- comparing -----------------------------------------------------------------

def close(ours: float | None, ref: float | None, rel: float = REL, digits: int = 3) -> bool:
    """Within ``rel``, allowing for the golden's rounding to ``digits`` decimals."""
    if ref is None or ours is None or (isinstance(ours, float) and math.isnan(ours)):
        return ref is None and (ours is None or math.isnan(ours))
    return abs(ours - ref) <= rel * abs(ref) + 0.6 * 10 ** -digits


Pairs = list[tuple[str, float | None, float | None]]


def idle_pairs(view: Trace, g: dict) -> Pairs:
    ours = {(r["rank"], r["stream"], r["idle_category"]): r for r in idle.idle_breakdown(view).to_dicts()}
    out: Pairs = []
    rank = idle.rank_of(view)
    for r in g["get_idle_time_breakdown"]["result"]["idle_time"]["records"]:
        if r["rank"] != rank:
            continue
        o = ours.get((r["rank"], r["stream"], r["idle_category"]), {})
        out.append((f"{r['stream']} {r['idle_category']} us", o.get("idle_us"), r["idle_time"]))
        ratio = o.get("idle_ratio")
        out.append((f"{r['stream']} {r['idle_category']} ratio", None if ratio is None else round(ratio, 2), r["idle_time_ratio"]))
    stats = {(r["rank"], r["stream"], r["idle_category"]): r for r in idle.idle_gap_stats(view).to_dicts()}
    for r in g["get_idle_time_breakdown(show_idle_interval_stats=True)"]["result"]["idle_interval_stats"]["records"]:
        if r["rank"] != rank:
            continue
        o = stats.get((r["rank"], r["stream"], r["idle_category"]), {})
        for k in ("count", "mean", "std", "min", "25%", "50%", "75%", "max"):
            v = o.get(k)
            out.append((f"{r['stream']} {r['idle_category']} {k}", None if v is None else round(v, 2), r[k]))
    return out


def temporal_pairs(view: Trace, g: dict) -> Pairs:
    ref = {r["rank"]: r for r in g["get_temporal_breakdown"]["result"]["records"]}[idle.rank_of(view)]
    o = idle.temporal_breakdown(view).to_dicts()[0]
    names = [("idle_time(us)", "idle_us"), ("compute_time(us)", "compute_us"),
             ("non_compute_time(us)", "non_compute_us"), ("kernel_time(us)", "kernel_span_us")]
    return [(k, o[a], ref[k]) for k, a in names] + [
        (f"{k}_pctg", round(o[f"{k.split('_time')[0]}_pct"], 2), ref[f"{k}_pctg"])
        for k in ("idle_time", "compute_time", "non_compute_time")
    ]


def kernel_type_pairs(views: list[Trace], g: dict) -> Pairs:
    """Per-type time summed over ranks; a golden type of 0 µs may be absent from ours."""
    ours = pl.concat([idle.kernel_type_breakdown(v) for v in views]).group_by("kernel_type").agg(pl.col("time_us").sum())
    total = float(ours["time_us"].sum())
    by_type = dict(ours.iter_rows())
    out: Pairs = []
    for r in g["get_gpu_kernel_breakdown"]["result"]["kernel_type_breakdown"]["records"]:
        t = by_type.get(r["kernel_type"], 0.0)
        out.append((r["kernel_type"], t, r["sum"]))
        out.append((f"{r['kernel_type']} %", round(100 * t / total, 1), r["percentage"]))
    return out


def kernel_pairs(view: Trace, g: dict) -> Pairs:
    """Per-kernel sums; min/max/mean/std only where HTA computed them from durations.

    When a type has more than 10 kernels, HTA re-aggregates the kept rows by
    their *total*, so its max/min/mean of a named kernel equal the total and
    its std is 0: that is HTA's mistake, so only the totals are compared
    there (and all statistics of ``others``, which are over kernel totals).
    """
    rank = idle.rank_of(view)
    ours = {(r["kernel_type"], r["name"]): r for r in idle.kernel_breakdown(view).to_dicts()}
    per_type = stream_work(view).group_by("kernel_type").agg(pl.col("name").n_unique())
    regrouped = {t for t, n in per_type.iter_rows() if n > 10}
    out: Pairs = []
    for r in g["get_gpu_kernel_breakdown"]["result"]["kernel_breakdown_top30_by_sum"]["records"]:
        if r["rank"] != rank:
            continue
        o = ours.get((r["kernel_type"], r["name"]), {})
        out.append((f"{r['name'][:40]} sum", o.get("sum_us"), r["sum (us)"]))
        if r["kernel_type"] not in regrouped or r["name"] == "others":
            for k, a in (("max (us)", "max_us"), ("min (us)", "min_us"), ("mean (us)", "mean_us"), ("stddev", "std_us")):
                out.append((f"{r['name'][:40]} {k}", o.get(a), r[k]))
    return out


def overlap_pairs(view: Trace, g: dict) -> Pairs:
    ref = {r["rank"]: r for r in g["get_comm_comp_overlap"]["result"]["records"]}[idle.rank_of(view)]
    return [("overlap %", idle.comm_comp_overlap(view)["overlap_pct"][0], ref["comp_comm_overlap_pctg"])]


def launch_pairs(view: Trace, g: dict, calls: tuple[str, ...] | None) -> Pairs:
    ref = g["get_cuda_kernel_launch_stats"]["result"][str(idle.rank_of(view))]
    stats = launch.launch_stats(view, calls)
    summary = {r["metric"]: r for r in launch.launch_summary(stats).to_dicts()}
    out: Pairs = [("count", stats.height, ref["count"])]
    for metric in ("cpu_duration", "gpu_duration", "launch_delay"):
        s = summary.get(metric, {})
        for k in ("mean", "median", "sum", "min", "max"):
            out.append((f"{metric} {k}", s.get(f"{k}_us", 0.0 if k == "sum" else None), ref[metric][k]))
        out.append((f"{metric} negative", s.get("negative", 0), ref[metric]["negative_count"]))
    return out


def described_pairs(ours: pl.DataFrame, records: list[dict], key: str, prefix: str) -> Pairs:
    by_key = {(r["rank"], r[key]): r for r in ours.to_dicts()}
    out: Pairs = []
    for r in records:
        o = by_key.get((r["rank"], r[key]), {})
        for k in ("count", "mean", "std", "min", "25%", "50%", "75%", "max"):
            out.append((f"{r[key]} {k}", o.get(k), r[f"{prefix}.{k}"]))
    return out


def queue_pairs(view: Trace, g: dict, calls: tuple[str, ...] | None) -> Pairs:
    result = g["get_queue_length_summary"]["result"]
    records = [r for r in result["records"] if r["rank"] == idle.rank_of(view)] if result else []
    return described_pairs(launch.queue_length_summary(view, calls), records, "stream", "queue_length")


def membw_pairs(view: Trace, g: dict) -> Pairs:
    result = g["get_memory_bw_summary"]["result"]
    records = [r for r in result["records"] if r["rank"] == idle.rank_of(view)] if result else []
    return described_pairs(launch.memory_bw_summary(view), records, "name", "memory_bw_gbps")


def mismatches(pairs: Pairs, rel: float = REL) -> list[tuple[str, float | None, float | None]]:
    return [(k, o, r) for k, o, r in pairs if not close(o, r, rel)]


def ok(g: dict, call: str) -> bool:
    c = g["calls"].get(call)
    return bool(c and c["ok"])


# --- HTA's view: the algorithms --------------------------------------------------

HTA_VIEW_CHECKS: dict[str, tuple[str, Callable[[Path, dict], Pairs]]] = {
    "temporal": ("get_temporal_breakdown", lambda p, g: temporal_pairs(hta_view(p, True), g)),
    "kernel_types": ("get_gpu_kernel_breakdown", lambda p, g: kernel_type_pairs([hta_view(p, True)], g)),
    "kernels": ("get_gpu_kernel_breakdown", lambda p, g: kernel_pairs(hta_view(p, True), g)),
    "overlap": ("get_comm_comp_overlap", lambda p, g: overlap_pairs(hta_view(p, True), g)),
    "idle": ("get_idle_time_breakdown", lambda p, g: idle_pairs(hta_view(p, False), g)),
    "launch": ("get_cuda_kernel_launch_stats", lambda p, g: launch_pairs(hta_view(p, False), g, HTA_LAUNCH_CALLS)),
    "queue": ("get_queue_length_summary", lambda p, g: queue_pairs(hta_view(p, False), g, HTA_QUEUE_CALLS)),
}


# each check on the files where HTA gave a result.
HTA_VIEW_CASES = [
    (name, check) for check in sorted(HTA_VIEW_CHECKS) for name in GOLDEN_FILES if ok(golden(name), HTA_VIEW_CHECKS[check][0])
]


@pytest.mark.parametrize(("name", "check"), HTA_VIEW_CASES)
def test_hta_view_matches_golden(name: str, check: str) -> None:
    call, pairs_of = HTA_VIEW_CHECKS[check]
    g = golden(name)["calls"]
    pairs = pairs_of(trace_file(name), g)
    tolerance, reason = next(
        (v for (frag, c), v in HTA_VIEW_EXCEPTIONS.items() if frag in name and c == check), (REL, None)
    )
    if tolerance is None:
        assert mismatches(pairs), f"listed as an exception but matches now: {reason}"
    else:
        bad = mismatches(pairs, tolerance)
        assert not bad, bad[:6]


def test_hta_view_reproduces_qwen_failure() -> None:
    """HTA's temporal breakdown fails on Qwen (non-compute time -17 µs); the rounded view shows
    the same -17, while in exact ns the non-compute time is positive."""
    path = trace_file("tracelens__h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz.json")
    assert idle.temporal_breakdown(hta_view(path, True))["non_compute_us"][0] == -17.0
    ours = idle.temporal_breakdown(our_view(path)).row(0, named=True)
    assert ours["non_compute_us"] > 0
    assert ours["idle_us"] + ours["compute_us"] + ours["non_compute_us"] == pytest.approx(ours["kernel_span_us"])


def test_hta_view_memory_bandwidth_on_ns_traces() -> None:
    """HTA's bandwidth is Kineto's (bytes / exact ns duration), which is also ours on ns traces."""
    for name in GOLDEN_FILES:
        path = trace_file(name)
        g = golden(name)
        if not ok(g, "get_memory_bw_summary") or not has_fractional_ts(loaded(path)):
            continue
        # HTA's running sum leaves float residue (~1e-13 GB/s) that it counts as a positive
        # point (shown as 0.0); we drop residue, so a minimum of 0.0 is not compared.
        pairs = [(k, o, r) for k, o, r in membw_pairs(our_view(path), g["calls"]) if not (k.endswith("min") and r == 0.0)]
        bad = mismatches(pairs)
        if any(f in name for f in MEMSET_ROUNDING_TRACES):
            assert bad and all(k.startswith("Memset") for k, _, _ in bad), (name, bad)
        else:
            assert not bad, (name, bad[:6])


# --- our view: the figures we report ---------------------------------------------

SYNC_WAIT_TRACES = ("alexnet", "critical_path__simple_add", "cuda_event_sync")
CPU_OP_STREAM_TRACES = ("triton_example", "tracelens__b200")
DEVICE_WAIT_TRACES = ("mtia",)


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_our_temporal_breakdown(name: str) -> None:
    g = golden(name)
    path = trace_file(name)
    view = our_view(path)
    ours = idle.temporal_breakdown(view)
    if not ok(g, "get_temporal_breakdown"):
        # HTA raises IndexError without GPU kernels; we return no row.  Qwen: see above.
        assert ours.height == 0 or "Qwen" in name
        return
    bad = mismatches(temporal_pairs(view, g["calls"]))
    if any(f in name for f in SYNC_WAIT_TRACES + CPU_OP_STREAM_TRACES):
        # HTA counts cuda_sync waits (and CPU ops with a stream arg) as GPU work;
        # they are the host or a stream *waiting*, so we leave them out.  Adding
        # them back (HTA's view) reproduces HTA, see test_hta_view_matches_golden.
        extra = stream_arg_events(path, loaded(path))
        assert extra.height > 0
        assert float(ours["idle_us"][0]) >= 0
    elif any(f in name for f in DEVICE_WAIT_TRACES):
        # MTIA records its streams' event waits (352 ms here) among its device
        # events; HTA counts them as compute, we as the stream waiting.
        # Adding them back (HTA's view) reproduces HTA.
        ref = g["calls"]["get_temporal_breakdown"]["result"]["records"][0]
        assert float(ours["compute_us"][0]) < ref["compute_time(us)"]
        assert float(ours["idle_us"][0]) > ref["idle_time(us)"]
    elif has_fractional_ts(view):
        # ns traces: HTA's ceil/floor rounding shrinks each kernel by up to 2 µs,
        # so HTA reports less compute and more idle time than there is.
        ref = g["calls"]["get_temporal_breakdown"]["result"]["records"][0]
        assert float(ours["compute_us"][0]) > ref["compute_time(us)"]
        assert close(float(ours["kernel_span_us"][0]), ref["kernel_time(us)"])
    else:
        assert not bad, bad


#: Traces with ns timestamps: compared in HTA's view only (its µs rounding changes every gap).
NS_TRACES = (
    "hta__mtia_inference_trace", "hta__nccl_parser_config", "hta__ns_resolution_trace", "hta__triton_example",
    "tracelens__b200", "tracelens__h100", "ai-performance-engineering__b200_gpt2_toy", "tracelens__b300",
    "tracelens__mi210", "tracelens__mi300__ddp_resnet18_no_pool",
)


def _ns(name: str) -> bool:
    return name.startswith(NS_TRACES)


@pytest.mark.parametrize("name", [n for n in GOLDEN_FILES if _ns(n)])
def test_ns_traces_are_listed_as_such(name: str) -> None:
    assert has_fractional_ts(our_view(trace_file(name)))


@pytest.mark.parametrize("name", [n for n in GOLDEN_FILES if not _ns(n)])
def test_our_idle_launch_queue_on_us_traces(name: str) -> None:
    """On whole-µs traces our default figures are HTA's, except where a reason is given."""
    g = golden(name)
    path = trace_file(name)
    view = our_view(path)
    assert not has_fractional_ts(view), "an ns trace: add it to NS_TRACES"
    if ok(g, "get_idle_time_breakdown") and any(frag in name for frag in OVERLAPPING_ON_A_STREAM):
        # HTA's negative gaps are overlaps: ours has none, and no negative idle.
        assert mismatches(idle_pairs(view, g["calls"]))
        assert (idle.idle_gaps(view)["gap_ns"] >= 0).all()
    elif ok(g, "get_idle_time_breakdown"):
        assert not mismatches(idle_pairs(view, g["calls"]))
    if ok(g, "get_cuda_kernel_launch_stats"):
        # We count every launch API; HTA only its list.  Restricted to that list they agree.
        all_launches = launch.launch_stats(view)
        outside = int((~all_launches["launch"].is_in(list(HTA_LAUNCH_CALLS))).sum())
        assert all_launches.height == g["calls"]["get_cuda_kernel_launch_stats"]["result"][str(idle.rank_of(view))]["count"] + outside
        assert not mismatches(launch_pairs(view, g["calls"], HTA_LAUNCH_CALLS))
    if ok(g, "get_memory_bw_summary") and g["calls"]["get_memory_bw_summary"]["result"]:
        # The file rounds durations to whole µs; ours, like HTA's, is the bandwidth
        # Kineto wrote from the exact ns duration, so the figures
        # agree.  Except on trace_diff/test, where HTA counts the float residue its
        # running sum leaves when a copy ends (~1e-13 GB/s) as a positive point (7674
        # points for 3840 DtoD copies, quartiles near 0) and, sorting unstably, adds a
        # copy starting at the µs another ends to it (its max, 671.5 GB/s, is two
        # back-to-back copies on stream 7; one stream runs one copy at a time).
        pairs = [(k, o, r) for k, o, r in membw_pairs(view, g["calls"]) if not (k.endswith("min") and r == 0.0)]
        bad = mismatches(pairs)
        if "trace_diff__test" in name:
            assert bad and all(k.startswith("Memcpy DtoD") for k, _, _ in bad), bad
        elif "resnet_kineto" in name:
            # The same unstable sort: 5 memsets start at the µs another ends, and HTA
            # adds 2 of them to the one ending (364 points to our 362, median 7.4 GB/s
            # to our 3.9); the memsets never overlap, so no two run at once.
            assert bad and all(k.startswith("Memset") for k, _, _ in bad), bad
        else:
            assert not bad, bad[:6]


def test_trace_filter_two_ranks() -> None:
    """Both ranks of HTA's two-rank directory: each rank's figures, and kernel types summed over ranks."""
    g = golden("hta__trace_filter.json")["calls"]
    paths = [TRACES / "hta" / "trace_filter" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]
    views = [our_view(p) for p in paths]
    assert [idle.rank_of(v) for v in views] == [0, 1]
    bad: Pairs = mismatches(kernel_type_pairs(views, g))
    for v in views:
        # Memory bandwidth is left out: whole-µs trace, see test_our_idle_launch_queue_on_us_traces.
        bad += mismatches(temporal_pairs(v, g) + overlap_pairs(v, g) + kernel_pairs(v, g) + idle_pairs(v, g))
        bad += mismatches(launch_pairs(v, g, HTA_LAUNCH_CALLS) + queue_pairs(v, g, HTA_QUEUE_CALLS))
    assert not bad, bad[:6]


#: DLRM ranks whose figures HTA gets otherwise, and why.
DLRM_EXCEPTIONS = {
    # 64 kernels of the previous step have no launch in the file; HTA links a kernel
    # without one to the event in row 0 (a cpu_op 14 ms later), so it counts the
    # short gaps between them as host_wait where we count kernel_wait.
    1: ("idle", ("7 host_wait", "7 kernel_wait")),
    3: ("idle", ("7 host_wait", "7 kernel_wait")),
    # HTA's unstable sort of an enqueue and a dequeue at the same µs (see
    # HTA_VIEW_EXCEPTIONS): its mean lies between enqueue-first and dequeue-first.
    4: ("queue", ("7 mean", "7 std")),
    5: ("queue", ("7 mean", "7 std")),
}


def test_dlrm_eight_ranks() -> None:
    """HTA on the eight DLRM ranks as one directory: kernel types summed over ranks, and each rank's figures."""
    g = golden("param__dlrm_kineto.json")["calls"]
    paths = sorted((TRACES / "param" / "dlrm_kineto").glob("*.pt.trace.json.gz"))
    views = [our_view(p) for p in paths]
    assert sorted(idle.rank_of(v) for v in views) == list(range(8))
    assert not mismatches(kernel_type_pairs(views, g))
    for v in views:
        rank = idle.rank_of(v)
        assert not has_fractional_ts(v)
        checks = {
            "temporal": temporal_pairs(v, g) + overlap_pairs(v, g) + kernel_pairs(v, g) + membw_pairs(v, g),
            "idle": idle_pairs(v, g),
            "launch": launch_pairs(v, g, HTA_LAUNCH_CALLS),
            "queue": queue_pairs(v, g, HTA_QUEUE_CALLS),
        }
        for check, pairs in checks.items():
            bad = mismatches(pairs)
            listed, keys = DLRM_EXCEPTIONS.get(rank, (None, ()))
            if check == listed:
                assert bad and all(k.startswith(keys) for k, _, _ in bad), (rank, check, bad)
                if check == "queue":
                    assert not mismatches(pairs, 0.03), (rank, bad)
            else:
                assert not bad, (rank, check, bad[:6])


def test_without_last_step_keeps_what_hta_keeps() -> None:
    """HTA's GPU event count after dropping the last step is ours on a 5-step trace."""
    name = "hta__df_index_resolver__df_index_resolver.json.gz.json"
    trace = loaded(trace_file(name))
    trimmed = without_last_step(trace)
    assert trace.steps.height == 5
    assert trimmed.kernels.height == golden(name)["trace_stats"]["1"]["num_gpu_events"] < trace.kernels.height
    assert trimmed.runtime["ts"].max() < trace.steps["ts"].max()


# --- direct properties -------------------------------------------------------------

def test_idle_parts_add_up_and_gaps_are_classified() -> None:
    view = our_view(TRACES / "hta" / "df_index_resolver" / "df_index_resolver.json.gz")
    row = idle.temporal_breakdown(view).row(0, named=True)
    assert row["idle_us"] + row["compute_us"] + row["non_compute_us"] == pytest.approx(row["kernel_span_us"])
    gaps = idle.idle_gaps(view)
    work = stream_work(view)
    assert gaps.height == work.height - work["stream"].n_unique()
    kernel_wait = gaps.filter(pl.col("idle_category") == "kernel_wait")
    assert (kernel_wait["gap_ns"] < 30_000).all()
    per_stream = idle.idle_breakdown(view).group_by("stream").agg(pl.col("idle_ratio").sum())
    assert all(r == pytest.approx(1.0) for r in per_stream["idle_ratio"])


def test_queue_length_returns_to_zero_and_short_kernels_are_launch_bound() -> None:
    view = our_view(TRACES / "hta" / "df_index_resolver" / "df_index_resolver.json.gz")
    q = launch.queue_length(view)
    last = q.group_by("stream").agg(pl.col("queue_length").last())
    assert (last["queue_length"] == 0).all() and (q["queue_length"] >= 0).all()
    stats = launch.launch_stats(view)
    short = launch.short_kernels(stats, 20)
    assert short.height > 0 and (short["gpu_us"] < short["cpu_us"]).all()
    assert int(short["count"].sum()) == stats.filter(
        (pl.col("cpu_duration_us") <= 20) & (pl.col("gpu_duration_us") < pl.col("cpu_duration_us"))
    ).height


def test_functions_are_fast_on_216k_events() -> None:
    import time

    view = our_view(TRACES / "hta" / "df_index_resolver" / "df_index_resolver.json.gz")
    for fn in (idle.temporal_breakdown, idle.kernel_type_breakdown, idle.kernel_breakdown, idle.idle_breakdown,
               idle.idle_gap_stats, idle.comm_comp_overlap, launch.launch_stats, launch.queue_length_summary,
               launch.memory_bw_summary):
        start = time.perf_counter()
        fn(view)
        assert time.perf_counter() - start < 1.0, fn.__name__


# --- CLI ---------------------------------------------------------------------------

ALEXNET = TRACES / "hta" / "critical_path" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"


def test_cli_idle_json() -> None:
    result = CliRunner().invoke(cli, ["idle", str(ALEXNET), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) == {"temporal_breakdown", "kernel_types", "idle_by_stream", "idle_gap_stats", "comm_comp_overlap"}
    host_wait = {r["stream"]: r["idle_us"] for r in data["idle_by_stream"] if r["idle_category"] == "host_wait"}
    assert host_wait == {7: 12855007.0, 20: 12011718.0}  # HTA: the same


def test_cli_launches_csv_and_short_threshold() -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["launches", str(ALEXNET), "--csv", "--short-us", "5"])
    assert result.exit_code == 0, result.output
    assert "# launch_summary" in result.output and "# memory_bandwidth_gbps" in result.output
    wide = json.loads(runner.invoke(cli, ["launches", str(ALEXNET), "--json", "--short-us", "1000"]).output)
    narrow = json.loads(runner.invoke(cli, ["launches", str(ALEXNET), "--json", "--short-us", "5"]).output)
    assert sum(r["count"] for r in narrow["short_kernels"]) < sum(r["count"] for r in wide["short_kernels"])
    counts = {r["metric"]: r["count"] for r in wide["launch_summary"]}
    assert counts["cpu_duration"] == 98  # HTA: 98


def test_cli_rejects_trace_without_gpu_work() -> None:
    from kinetolens.cli.main import main

    path = TRACES / "hta" / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    with pytest.raises(SystemExit) as exc:
        main(["idle", str(path)])
    assert exc.value.code == 2
