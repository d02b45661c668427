"""The critical path of one rank, against HTA 0.5.0's ``golden/hta_critical_path``.

HTA's figures are HTA's model, not ground truth (see the golden README).
Where kinetolens labels an edge differently on purpose, the comparison maps
our labels onto HTA's: HTA counts memcpy/memset as ``gpu_compute_bound``
(we say ``gpu_memory``) and DataLoader time as ``cpu_bound`` (we say
``data_loading``).
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from kinetolens import load
from kinetolens.analysis.paths.critical_path import annotation_window, critical_path, step_window
from kinetolens.analysis.paths.dependency_graph import build_graph
from kinetolens.errors import TraceError
from tests.conftest import GOLDEN, trace_path

PARAM = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"
CASES = {
    "alexnet": ("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", PARAM, 1),
    "simple_add": ("hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz", PARAM, 1),
    "cuda_event_sync": ("hta/critical_path/cuda_event_sync/event_sync_trace.json.gz", "ProfilerStep", 0),
}
#: Our bound_by -> HTA's.
TO_HTA = {
    "cpu": "cpu_bound",
    "data_loading": "cpu_bound",
    "gpu_compute": "gpu_compute_bound",
    "gpu_memory": "gpu_compute_bound",
    "communication": "gpu_communication_bound",
    "kernel_gap": "gpu_kernel_kernel_overhead",
    "launch_overhead": "gpu_kernel_launch_overhead",
    "sync_wait": "",
}


def _golden(rel: str) -> dict:
    return json.loads((GOLDEN / "hta_critical_path" / (rel.replace("/", "__") + ".json")).read_text())


def _window_path(case: str):
    rel, annotation, instance = CASES[case]
    trace = load(trace_path(rel))
    return trace, annotation_window(trace, annotation, instance)


@pytest.mark.parametrize("case", sorted(CASES))
def test_length_and_bounds_match_hta(case: str) -> None:
    # HTA's path length within 1%, its bound-by shares within 1 point.
    rel, _, _ = CASES[case]
    gold = _golden(rel)
    trace, window = _window_path(case)
    cp = critical_path(trace, window)
    hta_len = gold["critical_path_length_us"]
    assert cp.length_us == pytest.approx(hta_len, rel=0.01)
    ours: dict[str, float] = {}
    for row in cp.summary.iter_rows(named=True):
        key = TO_HTA[row["bound_by"]]
        ours[key] = ours.get(key, 0.0) + row["pct"]
    for key, value in gold["summary"].items():
        assert ours.get(key, 0.0) == pytest.approx(value["pct"], abs=1.0), key
    assert sum(cp.summary["pct"]) == pytest.approx(100.0, abs=0.01)
    assert cp.notes == []
    # The time between top-level ops is not on the path, as in HTA: the span is longer.
    assert cp.span_us >= cp.length_us
    assert cp.span_us == pytest.approx(gold["path_span_us"], rel=0.03)


def test_window_is_htas_instance_rule() -> None:
    # --annotation NAME --instance I picks the I-th range containing NAME.
    gold = _golden(CASES["alexnet"][0])
    trace, window = _window_path("alexnet")
    assert (window.end - window.start) / 1000 == gold["window"]["annotation_events"][0]["dur"]
    with pytest.raises(TraceError, match="out of range"):
        annotation_window(trace, PARAM, 2)
    with pytest.raises(TraceError, match="no host range"):
        annotation_window(trace, "no such range", 0)


def test_step_window_is_the_profiler_step() -> None:
    # --step N and HTA's ProfilerStep instance 0 are the same window.
    trace, window = _window_path("cuda_event_sync")
    by_step = critical_path(trace, step_window(trace, 100))
    assert by_step.length_us == critical_path(trace, window).length_us == 2401.0
    with pytest.raises(TraceError, match="no step 7"):
        step_window(trace, 7)


def test_nested_cpu_edges_are_htas() -> None:
    # nested ops chain through their children. HTA's test pins the
    # first relu_ of simple_add: relu_ -> clamp_min_ -> cudaLaunchKernel -> back, 15/14/17/15/32 us.
    trace, window = _window_path("simple_add")
    g = build_graph(trace, window.start, window.end)
    relu = g.events.filter(pl.col("name") == "aten::relu_").sort("ts").row(0, named=True)
    cpu = {r["src"]: r for r in g.edges.filter(pl.col("type") == "cpu").iter_rows(named=True)}
    node, weights, names = 2 * relu["eid"], [], []
    while node != 2 * relu["eid"] + 1:
        edge = cpu[node]
        weights.append(edge["weight"] // 1000)
        names.append(g.events["name"][edge["eid"]])
        node = edge["dst"]
    assert weights == [15, 14, 17, 15, 32]
    assert names == ["aten::relu_", "aten::clamp_min_", "cudaLaunchKernel", "aten::clamp_min_", "aten::relu_"]


def _sync_pairs(case: str) -> set[tuple[str, str]]:
    trace, window = _window_path(case)
    g = build_graph(trace, window.start, window.end)
    names = g.events["name"]
    return {(names[r["src"] // 2], names[r["dst"] // 2]) for r in g.edges.filter(pl.col("type") == "sync").iter_rows(named=True)}


def test_gpu_to_cpu_syncs() -> None:
    # stream/event/device synchronizations are GPU -> CPU edges
    # (HTA's test: spin_kernel -> cudaEventSynchronize and -> cudaDeviceSynchronize).
    pairs = _sync_pairs("cuda_event_sync")
    spin = "at::cuda::(anonymous namespace)::spin_kernel(long)"
    assert (spin, "cudaEventSynchronize") in pairs
    assert (spin, "cudaDeviceSynchronize") in pairs
    assert ("Memcpy DtoH (Device -> Pageable)", "cudaStreamSynchronize") in pairs


def test_event_record_stream_wait_links_streams() -> None:
    # cudaEventRecord -> cudaStreamWaitEvent is a GPU -> GPU edge
    # (HTA's test: the fft2d_c2r_32x32 kernel on stream 20 -> a kernel on stream 7).
    trace, window = _window_path("alexnet")
    g = build_graph(trace, window.start, window.end)
    ev = g.events
    sync = g.edges.filter(pl.col("type") == "sync").with_columns(s=pl.col("src") // 2, d=pl.col("dst") // 2)
    gpu_gpu = sync.filter((pl.col("dst") % 2 == 0)).join(ev.select(s="eid", s_name="name", s_stream="stream"), on="s").join(
        ev.select(d="eid", d_stream="stream"), on="d"
    )
    assert gpu_gpu.filter(pl.col("s_name").str.starts_with("void fft2d_c2r_32x32") & (pl.col("s_stream") == 20) & (pl.col("d_stream") == 7)).height == 1
    assert (gpu_gpu["s_stream"] != gpu_gpu["d_stream"]).all()


def test_graph_launched_kernels_hang_off_their_launch() -> None:
    # kernels a CUDA/HIP graph launch releases depend on that launch
    # (HTA leaves them out of its launch edges). vLLM's replay trace runs its kernels in hipGraphLaunch.
    trace = load(trace_path("tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz"))
    from kinetolens.analysis.paths.critical_path import whole_window

    w = whole_window(trace)
    g = build_graph(trace, w.start, w.end)
    ev = g.events
    launch = g.edges.filter(pl.col("type") == "launch").with_columns(r=pl.col("src") // 2, k=pl.col("dst") // 2)
    graph_kernels = launch.join(ev.select(r="eid", rname="name"), on="r").filter(pl.col("rname") == "hipGraphLaunch")
    replayed = trace.kernels.join(trace.runtime.select("launch_id", rname="name"), on="launch_id").filter(pl.col("rname") == "hipGraphLaunch")
    assert graph_kernels.height == replayed.height == 361
    cp = critical_path(trace, w)
    on_path = cp.path.filter(pl.col("type") == "kernel")
    assert on_path.height > 300
    # Every activity of this ROCm trace starts >= 146 ms after its launch: a clock offset, said so.
    assert len(cp.notes) == 1 and "146.4 ms" in cp.notes[0] and "offset" in cp.notes[0]


def test_backward_thread_follows_its_forward_ops() -> None:
    # the backward thread. Each backward op on the autograd engine's
    # thread depends on its forward op on the main thread, so the path can run
    # forward ops -> backward ops -> their kernels instead of stopping at the thread's edge.
    trace = load(trace_path("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"))
    w = step_window(trace, 6)
    g = build_graph(trace, w.start, w.end)
    ev = g.events.select("eid", "tid", "ts", "end")
    cross = (
        g.edges.filter(pl.col("type") == "dependency")
        .with_columns(s=pl.col("src") // 2, d=pl.col("dst") // 2)
        .join(ev.rename({"eid": "s", "tid": "s_tid", "ts": "s_ts", "end": "s_end"}), on="s")
        .join(ev.rename({"eid": "d", "tid": "d_tid", "ts": "d_ts", "end": "d_end"}), on="d")
        .filter(pl.col("s_tid") != pl.col("d_tid"))
    )
    assert cross.height > 1000  # regression pin: 1119 forward -> backward links in step 6
    assert (cross["s_end"] <= cross["d_ts"]).all()
    cp = critical_path(trace, w)
    threads = {x for x in cp.path["where"].drop_nulls().to_list() if x.startswith("thread")}
    assert len(threads) == 2  # the path runs on the main and the backward thread
    assert cp.summary.filter(pl.col("bound_by") == "gpu_compute")["pct"][0] > 20


def test_chain_contraction_keeps_the_longest_path() -> None:
    # the longest path with chains contracted equals rustworkx's on the whole
    # graph, on random DAGs with long chains and parallel edges.
    import numpy as np
    import rustworkx as rx

    from kinetolens.analysis.paths.longest_path import Contracted, CycleError, longest_path

    rng = np.random.default_rng(19)
    for _ in range(30):
        n = int(rng.integers(2, 300))
        chain = np.arange(n - 1)
        extra = rng.integers(0, n, size=(int(rng.integers(0, n)), 2))
        extra = extra[extra[:, 0] != extra[:, 1]]
        src = np.concatenate([chain, extra.min(axis=1), extra[:4].min(axis=1)])
        dst = np.concatenate([chain + 1, extra.max(axis=1), extra[:4].max(axis=1)])
        w = rng.integers(0, 1000, size=src.size)
        keep = rng.random(src.size) > 0.3  # break the chain into pieces
        src, dst, w = src[keep], dst[keep], w[keep]
        best = {}
        for s, d, x in zip(src.tolist(), dst.tolist(), w.tolist()):
            best[(s, d)] = max(best.get((s, d), 0), x)
        g = rx.PyDiGraph(multigraph=True)
        g.add_nodes_from(range(n))
        g.add_edges_from(list(zip(src.tolist(), dst.tolist(), w.tolist())))
        want = rx.dag_longest_path_length(g, weight_fn=lambda _u, _v, x: x) if src.size else 0
        path = longest_path(src, dst, w, n)
        assert all((a, b) in best for a, b in zip(path, path[1:]))
        assert sum(best[(a, b)] for a, b in zip(path, path[1:])) == want
        # the length alone (what a what-if without path tables asks for) is the same sum
        if src.size:
            assert Contracted(src, dst, n).length(w) == (want if len(path) > 1 else None)
    with pytest.raises(CycleError):
        longest_path(np.array([0, 1]), np.array([1, 0]), np.array([1, 1]), 2)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_cpu_stretch_belongs_to_an_op(case: str) -> None:
    # time between two children of an op is the op's own time (HTA's
    # attribution: the enclosing op), the first top-level op of a thread included.
    trace, window = _window_path(case)
    g = build_graph(trace, window.start, window.end)
    assert g.edges.filter((pl.col("type") == "cpu") & pl.col("eid").is_null()).height == 0
    cp = critical_path(trace, window)
    assert cp.path.filter((pl.col("us") > 0) & pl.col("name").is_null()).height == 0


def test_unique_rows_is_numpys_row_wise_unique() -> None:
    # The graph's lookups group rows by (thread) and (device, stream) keys with
    # a lexsort instead of numpy's row-wise unique; same rows, same order, same places.
    import numpy as np

    from kinetolens.analysis.paths.dependency_graph import _unique_rows

    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 7, 2_000):
        cols = [rng.integers(-3, 3, n), rng.integers(0, 4, n).astype(np.int32), rng.integers(0, 2, n)]
        want, where = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        rows, inverse = _unique_rows(*cols)
        assert rows.dtype == want.dtype and rows.shape == want.shape and (rows == want).all()
        assert (inverse == where.reshape(-1)).all()
