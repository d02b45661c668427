"""Kernels replayed from CUDA/HIP graphs take the ops that launched them at
capture, checked on TraceLens' vLLM piecewise case
against its own per-op report."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.summary import summarize
from kinetolens.analysis.workload.work import kernel_work
from kinetolens.model.graph_replay import captured_nodes
from tests.conftest import GOLDEN, trace_path

CASE = "tracelens/inference/vllm_prefilldecode_piecewise"
REPLAY = f"{CASE}/graph_execution.json.gz"
CAPTURE_DIR = f"{CASE}/capture_traces"
PERF = GOLDEN / CASE / "perf_csvs"


@pytest.fixture(scope="module")
def paired() -> kinetolens.Trace:
    return kinetolens.load(trace_path(REPLAY), cache=False)


def _replayed(trace: kinetolens.Trace) -> pl.DataFrame:
    return trace.kernels.filter(pl.col("launch") == "hipGraphLaunch")


def test_replayed_kernels_take_the_capture_ops(paired: kinetolens.Trace) -> None:
    # automatic pairing with capture_traces/ beside the
    # replay; >= 95% of replayed kernel time on an op that launched it at
    # capture (an ATen or engine op), and on a module.
    assert paired.metadata["graph_capture"].endswith(".pt.trace.json.gz")
    assert not paired.warnings  # 23 layer graphs hold the same kernels, captured with the same shapes
    replayed = _replayed(paired)
    assert replayed.height == 361
    total = replayed["dur"].sum()
    captured_ops = paired.ops.filter("from_capture").select("op_id", op_kind="kind")
    on_op = replayed.join(captured_ops, on="op_id", how="inner")
    assert on_op["dur"].sum() / total >= 0.95
    # Never the annotation around the graph launch (what every replayed kernel got before).
    assert not replayed["op"].str.starts_with("execute_").any()
    assert (on_op["op_kind"].cast(pl.String) == "op").all()
    assert replayed.filter(pl.col("module").is_not_null())["dur"].sum() / total >= 0.95
    assert replayed["module"].str.starts_with("GptOssForCausalLM_0").all()
    # Each says where in which graph it ran: 25 captured graphs, nodes in order.
    assert replayed["graph_id"].n_unique() == 25
    first = replayed.filter(pl.col("graph_id") == 0).sort("graph_node")
    assert first["graph_node"].to_list() == [0, 1, 2, 3]
    assert first["op"].to_list() == ["triton_poi_fused_0", "aiter::rms_norm", "aten::addmm", "_C::rotary_embedding"]
    # Eager kernels are no graph's.
    eager = paired.kernels.filter(pl.col("launch") != "hipGraphLaunch")
    assert eager["graph_id"].is_null().all() and eager["graph_node"].is_null().all()


def test_capture_ops_cost_no_replay_time(paired: kinetolens.Trace) -> None:
    # the appended capture ops are instants at their
    # graph launch (they ran no CPU code at replay), with their own id range.
    copies = paired.ops.filter("from_capture")
    own = paired.ops.filter(~pl.col("from_capture"))
    assert copies["op_id"].min() == own.height
    assert (copies["dur"] == 0).all()
    launches = paired.runtime.filter(pl.col("name") == "hipGraphLaunch")["ts"]
    assert copies["ts"].is_in(launches.implode()).all()
    assert copies.filter(pl.col("parent_id").is_not_null())["parent_id"].is_in(copies["op_id"].implode()).all()


def test_per_op_kernel_time_matches_tracelens(paired: kinetolens.Trace) -> None:
    # TraceLens' ops_summary.csv per-op kernel
    # time, every row within 1% (measured: equal to the ns).
    golden = pl.read_csv(PERF / "ops_summary.csv").select("name", us="total_direct_kernel_time_sum")
    ours = paired.kernels.group_by(name="op").agg(ours=pl.col("dur").sum() / 1e3)
    both = golden.join(ours, on="name", how="left")
    assert both["ours"].null_count() == 0, both.filter(pl.col("ours").is_null())
    off = both.filter(((pl.col("ours") - pl.col("us")).abs() / pl.col("us")) > 0.01)
    assert off.height == 0, off


def test_gemm_time_and_flops_match_tracelens(paired: kinetolens.Trace) -> None:
    # GEMM.csv's aten::addmm/aten::mm rows:
    # kernel time per shape and GFLOPs within 1%, the replayed addmm
    # kernels' FLOPs coming from the capture op's shapes.  (TraceLens counts
    # the bias add of addmm as well: its GFLOPs are 0.02% higher.)
    golden = pl.read_csv(PERF / "GEMM.csv").filter(pl.col("name").is_in(["aten::addmm", "aten::mm"]))
    work = kernel_work(paired)
    k = (
        paired.kernels.join(work, on="kernel_id", how="left")
        .join(paired.ops.select("op_id", "input_dims"), on="op_id", how="left")
        .filter(pl.col("op").is_in(["aten::addmm", "aten::mm"]))
        .group_by("op", "input_dims")
        .agg(us=pl.col("dur").sum() / 1e3, gflops=pl.col("flops").first() / 1e9, n=pl.len())
    )
    assert k.height == golden.height == 4
    for row in golden.iter_rows(named=True):
        mine = k.filter(
            (pl.col("op") == row["name"]) & (pl.col("input_dims").str.replace_all(" ", "") == row["Input Dims_first"].replace(" ", ""))
        )
        assert mine.height == 1, row["Input Dims_first"]
        assert mine["us"][0] == pytest.approx(row["Kernel Time (µs)_sum"], rel=0.01)
        assert mine["gflops"][0] == pytest.approx(row["GFLOPS_first"], rel=0.01)


def test_without_a_capture_replays_keep_their_owner() -> None:
    # no capture trace -> replayed kernels grouped per
    # graph (same kernels, same graph_id) under the op around the launch.
    t = kinetolens.load(trace_path(REPLAY), capture=False, cache=False)
    replayed = _replayed(t)
    assert "graph_capture" not in t.metadata
    assert replayed["op"].is_not_null().all()
    assert replayed["op"].str.starts_with("execute_8192").all()
    assert replayed["graph_id"].is_not_null().all()
    # The first piece (4 kernels), the 23 layer pieces (15), the last (12).
    sizes = replayed.group_by("launch_id").agg(pl.len(), pl.col("graph_id").first()).group_by("graph_id").agg(
        pl.col("len").first(), launches=pl.len()
    ).sort("graph_id")
    assert sizes["len"].to_list() == [4, 15, 12]
    assert sizes["launches"].to_list() == [1, 23, 1]
    assert not t.ops["from_capture"].any()


def test_explicit_capture_and_cache_key(tmp_path: Path) -> None:
    # load(REPLAY, capture=...) with a copy of the replay
    # that has no capture_traces/ beside it; the cache keeps paired and
    # unpaired loads apart.
    replay = tmp_path / "replay.json.gz"
    shutil.copy(trace_path(REPLAY), replay)
    cache = tmp_path / "cache"
    bare = kinetolens.load(replay, cache=cache)
    assert _replayed(bare)["op"].str.starts_with("execute_").all()
    folder = kinetolens.load(replay, capture=trace_path(CAPTURE_DIR), cache=cache)
    capture_file = next(trace_path(CAPTURE_DIR).glob("*.pt.trace.json.gz"))
    by_file = kinetolens.load(replay, capture=capture_file, cache=cache)
    for t in (folder, by_file):
        assert _replayed(t)["op"].is_in(["aten::addmm", "vllm::moe_forward"]).any()
    again = kinetolens.load(replay, cache=cache)  # read back from the cache: still unpaired
    assert _replayed(again)["op"].str.starts_with("execute_").all()
    cached = kinetolens.load(replay, capture=trace_path(CAPTURE_DIR), cache=cache)  # paired, from the cache
    assert cached.kernels.equals(folder.kernels) and cached.ops.equals(folder.ops)
    assert cached.metadata["graph_capture"] == folder.metadata["graph_capture"]


def test_cli_picks_up_the_capture(tmp_path: Path) -> None:
    # `kinetolens ops` on the replay pairs automatically;
    # --capture names it; a missing one is one line and exit 2.
    env_cmd = [sys.executable, "-m", "kinetolens.cli.main"]
    out = subprocess.run(
        [*env_cmd, "kernels", str(trace_path(REPLAY)), "--csv", "-c", "op,graph", "--no-cache"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert "vllm::moe_forward" in out and "execute_8192" not in out
    assert "triton_poi_fused_0,0:0\n" in out and "aten::mm,\n" in out  # graph:node, empty when eager
    replay = tmp_path / "replay.json.gz"
    shutil.copy(trace_path(REPLAY), replay)
    out = subprocess.run(
        [*env_cmd, "kernels", str(replay), "--csv", "-c", "op", "--no-cache", "--capture", str(trace_path(CAPTURE_DIR))],
        capture_output=True, text=True, check=True,
    ).stdout
    assert "vllm::moe_forward" in out
    bad = subprocess.run(
        [*env_cmd, "summary", str(replay), "--capture", str(tmp_path / "absent")], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    for command in ("summary", "kernels", "ops", "modules", "roofline", "report"):
        helped = subprocess.run([*env_cmd, command, "--help"], capture_output=True, text=True, check=True).stdout
        assert "--capture" in helped, command


def _with_recorded_graph_ids(src: Path, dst: Path) -> None:
    """``src`` with the ids CUDA >= 12 Kineto writes on GPU work: ``graph id``
    and ``graph node id`` on replayed kernels, ``graph id`` 0 on eager ones."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    launches = {
        e["args"]["correlation"]: 1000 + i
        for i, e in enumerate(x for x in doc["traceEvents"] if x.get("name") == "hipGraphLaunch")
    }
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy"):
            graph = launches.get(e["args"].get("correlation"))
            e["args"]["graph id"] = graph or 0
            e["args"]["graph node id"] = 0 if graph is None else graph * 100 + int(e["ts"]) % 97
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))


def test_recorded_graph_ids_are_kept(tmp_path: Path) -> None:
    # graph and node ids where the trace records them
    # (Kineto's "graph id"/"graph node id", added here to a copy of the real
    # replay as CUDA >= 12 Kineto writes them); pairing with the capture
    # still goes by sequence (recorded ids name the instantiated graph).
    replay = tmp_path / "replay.json.gz"
    _with_recorded_graph_ids(trace_path(REPLAY), replay)
    bare = kinetolens.load(replay, cache=False)
    replayed = _replayed(bare)
    assert replayed["graph_id"].n_unique() == 25 and replayed["graph_id"].min() == 1000
    assert (replayed["graph_node"] // 100 == replayed["graph_id"]).all()
    eager = bare.kernels.filter(pl.col("launch") != "hipGraphLaunch")
    assert eager["graph_id"].is_null().all()
    paired = kinetolens.load(replay, capture=trace_path(CAPTURE_DIR), cache=False)
    assert sorted(_replayed(paired)["graph_id"].unique().to_list()) == list(range(25))
    assert _replayed(paired)["op"].is_in(["vllm::moe_forward"]).sum() == 72


def test_a_replay_missing_a_kernel_still_pairs() -> None:
    # xDiT's capture trace also replays its (FULL) graph
    # once, with one of the 994 captured kernels absent from the replay;
    # paired with itself, every replayed kernel still takes its capture op.
    capture = trace_path("tracelens/inference/xdit_flux.1/capture_traces/capture_trace_rank_0.json.gz")
    t = kinetolens.load(capture, capture=capture, cache=False)
    replayed = _replayed(t)
    assert replayed.height == 993
    from_capture = t.ops.filter("from_capture")["op_id"].implode()
    assert replayed["op_id"].is_in(from_capture).all()
    assert replayed["module"].is_not_null().all()
    assert not t.warnings
    assert replayed.filter(pl.col("op") == "aten::mm")["dur"].sum() / replayed["dur"].sum() > 0.5


def test_summary_measures_replayed_attribution(paired: kinetolens.Trace) -> None:
    # summary reports the replayed kernel time
    # and the share of it on its capture op and on a module; without the
    # capture trace none is on a capture op (the op it shows then is the
    # annotation around the launch, which is why `op` alone read 100%).
    a = summarize(paired).attribution
    assert a.graph_replay_time_us == pytest.approx(149919.755)
    assert a.graph_replay_with_capture_op == 1.0 and a.graph_replay_with_module == 1.0
    bare = summarize(kinetolens.load(trace_path(REPLAY), capture=False, cache=False)).attribution
    assert bare.op == 1.0 and bare.graph_replay_with_capture_op == 0.0
    # The file's own events: the 508 ops copied from the capture are not counted.
    assert summarize(paired).events.ops == 642 and summarize(paired).events.annotations == 1


def test_a_replay_under_no_op_is_named_by_its_graph(tmp_path: Path) -> None:
    # without a capture trace and without the annotation
    # around the launches (removed from a copy of the real replay), replayed
    # kernels are named by launch and graph, with the module and source line
    # of the launch: never anonymous time.
    doc = json.loads(gzip.decompress(trace_path(REPLAY).read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "user_annotation"]
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(doc))
    replayed = _replayed(kinetolens.load(replay, capture=False, cache=False))
    assert replayed["op_id"].is_null().all()
    counts = dict(replayed.group_by("op").len().iter_rows())
    assert counts == {"hipGraphLaunch (graph 0)": 4, "hipGraphLaunch (graph 1)": 345, "hipGraphLaunch (graph 2)": 12}
    assert replayed["module"].str.starts_with("GptOssForCausalLM_0").all()
    assert replayed["source"].is_not_null().all()


def test_a_capture_of_other_graphs_pairs_nothing_and_says_so() -> None:
    # pairing vLLM's replay with xDiT's capture trace finds
    # no graph with its kernels; every replayed kernel keeps the op around its
    # launch and a warning counts them.
    other = trace_path("tracelens/inference/xdit_flux.1/capture_traces")
    t = kinetolens.load(trace_path(REPLAY), capture=other, cache=False)
    assert _replayed(t)["op"].str.starts_with("execute_").all()
    assert not t.ops["from_capture"].any()
    [warning] = [w for w in t.warnings if w.kind == "replayed kernels without a captured node"]
    assert warning.count == 361


def test_nodes_captured_outside_every_op_keep_the_replay_owner(tmp_path: Path) -> None:
    # a capture trace without ops (its cpu_op and
    # user_annotation events removed from a copy of the real one) still
    # pairs every replayed kernel with its graph and node, and gives the
    # module of the capture-time launch; the op stays the replay's owner.
    src = next(trace_path(CAPTURE_DIR).glob("*.pt.trace.json.gz"))
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("cpu_op", "user_annotation")]
    capture = tmp_path / "capture.json"
    capture.write_text(json.dumps(doc))
    t = kinetolens.load(trace_path(REPLAY), capture=capture, cache=False)
    replayed = _replayed(t)
    assert not t.warnings
    assert replayed["op"].str.starts_with("execute_8192").all()
    assert sorted(replayed["graph_id"].unique().to_list()) == list(range(25))
    assert not t.ops["from_capture"].any()
    launches = captured_nodes(kinetolens.load(capture, capture=False, cache=False).runtime)
    both = replayed.join(launches, left_on=["graph_id", "graph_node"], right_on=["graph", "node"], how="inner")
    assert both.height == 361 and (both["module"] == both["cap_module"]).all()
    assert (both["source"] == both["cap_source"]).all()


def test_graphs_captured_with_other_shapes_are_flagged(tmp_path: Path) -> None:
    # the 23 layer graphs hold the same kernels; when one
    # of them was captured with other shapes (its addmm inputs set to a batch
    # of 4096 in a copy of the real capture trace, as when an engine
    # captures one graph per batch size), which replay took which graph is a
    # guess, and a warning counts the replayed kernels concerned.
    src = next(trace_path(CAPTURE_DIR).glob("*.pt.trace.json.gz"))
    doc = json.loads(gzip.decompress(src.read_bytes()))
    events = doc["traceEvents"]
    begins = sorted(e["ts"] for e in events if e.get("name") == "hipStreamBeginCapture")
    ends = sorted(e["ts"] for e in events if e.get("name") == "hipStreamEndCapture")
    changed = 0
    for e in events:
        if e.get("name") == "aten::addmm" and begins[2] <= e["ts"] < ends[2]:
            e["args"]["Input Dims"][1][0] = 4096
            changed += 1
    assert changed == 3
    capture = tmp_path / "capture.json"
    capture.write_text(json.dumps(doc))
    t = kinetolens.load(trace_path(REPLAY), capture=capture, cache=False)
    [warning] = [w for w in t.warnings if w.kind == "replayed kernels matching graphs captured with different shapes"]
    assert warning.count == 23 * 15
    assert _replayed(t)["op_id"].is_in(t.ops.filter("from_capture")["op_id"].implode()).all()
