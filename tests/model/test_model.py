"""Ingest and model invariants on real traces."""

from __future__ import annotations

import os
import shutil

import polars as pl

import kinetolens
from kinetolens.cache import cache_key
from tests.conftest import TRACES, backward_roots


def test_epoch_timestamps_keep_nanoseconds() -> None:
    # ts is written as 1712195495519689.047 us: float64 would round it to
    # ...689.047 +- 0.125 us; we must keep every nanosecond digit.
    t = kinetolens.load(TRACES / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", cache=False)
    ts = t.ops["ts"].to_list()
    assert 1712195495519689047 in ts
    # Sub-microsecond digits survive: float64 would leave only multiples of 125 ns.
    assert any(v % 125 != 0 for v in ts)


def test_legacy_bare_array_loads_with_old_categories() -> None:
    t = kinetolens.load(TRACES / "kineto_legacy/resnet50_num_workers_0_2020-12/worker0.pt.trace.json.gz", cache=False)
    assert t.format == "kineto-legacy-array"
    assert t.kernels.filter(pl.col("kind") == "kernel").height == 9538
    assert t.ops.filter(pl.col("name") == "aten::cudnn_convolution").height > 0


def test_backward_kernels_take_forward_shapes_and_module() -> None:
    t = kinetolens.load(TRACES / "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    bwd = t.kernels.filter((pl.col("direction") == "bprop") & (pl.col("op") == "aten::cudnn_convolution_backward_weight"))
    assert bwd.height > 0
    assert set(bwd["fwd_op"].unique().to_list()) <= {"aten::cudnn_convolution", "aten::_convolution", "aten::convolution"}
    fwd = t.ops.filter(pl.col("op_id").is_in(bwd["fwd_op_id"].to_list()))
    assert fwd["input_dims"].null_count() == 0
    # Each op's kernels are numbered from 0 in launch order.
    subs = t.kernels.filter(pl.col("op_id").is_not_null()).group_by("op_id").agg(pl.col("sub").sort())
    assert all(s == list(range(len(s))) for s in subs["sub"].head(200).to_list())


def test_steps_cover_their_gpu_work() -> None:
    t = kinetolens.load(TRACES / "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    assert t.steps["step"].to_list() == [5, 6, 7, 8, 9, 10]
    for step in t.steps.iter_rows(named=True):
        ks = t.kernels.filter(pl.col("step") == step["step"])
        assert ks.height > 0
        assert (ks["ts"] + ks["dur"]).max() <= step["end"]
        assert step["end"] >= step["cpu_end"]


def test_corrupt_cache_is_rebuilt_not_trusted(tmp_path) -> None:
    src = TRACES / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    path = tmp_path / src.name
    shutil.copy(src, path)
    cache = tmp_path / "cache"
    first = kinetolens.load(path, cache=cache)
    entry = cache / cache_key(path)
    assert (entry / "kernels.arrow").exists()
    (entry / "kernels.arrow").write_bytes(b"not an Arrow file")
    again = kinetolens.load(path, cache=cache)
    assert again.kernels.equals(first.kernels)
    # A changed file gets a new key: the stale entry is never read.
    os.utime(path, ns=(1, 1))
    assert cache_key(path) != entry.name


RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
LEGACY = "kineto_legacy/resnet50_num_workers_0_2020-12/worker0.pt.trace.json.gz"


def test_creation_order_agrees_with_sequence_numbers() -> None:
    # The order rule, run on traces that also carry sequence numbers, must
    # pair every node with the same forward call the numbers name.
    from kinetolens.model.autograd_order import pair_by_order

    for rel in (RESNET, "hta/trace_diff/control/control.json.gz", "hta/nccl_parser_config/nccl_data.json.gz"):
        ops = kinetolens.load(TRACES / rel).ops
        pairs = pair_by_order(ops, ops["direction"].cast(pl.String).to_list(), backward_roots(ops))
        fwd = ops["fwd_op_id"].to_list()
        top = ops["top_op_id"].to_list()
        checked = [(r, f) for r, f in pairs.items() if fwd[r] is not None]
        assert len(checked) > 400, rel
        assert all(top[fwd[r]] == top[f] for r, f in checked), rel
        assert sum(fwd[r] == f for r, f in checked) >= 0.98 * len(checked), rel


def test_traces_without_sequence_numbers_link_by_creation_order() -> None:
    t = kinetolens.load(TRACES / LEGACY)
    assert t.ops["sequence_number"].null_count() == t.ops.height
    conv = t.kernels.filter((pl.col("direction") == "bprop") & (pl.col("grad_fn") == "CudnnConvolutionBackward"))
    assert conv.height > 0
    assert set(conv["fwd_op"].unique().to_list()) == {"aten::cudnn_convolution"}
    assert set(t.ops["fwd_link"].drop_nulls().unique().to_list()) == {"creation_order"}
    linked = kinetolens.load(TRACES / RESNET).ops["fwd_link"].drop_nulls().unique().to_list()
    assert "creation_order" not in linked


def test_engine_work_between_nodes_belongs_to_the_node_before() -> None:
    # PyTorch 1.8 records the engine's gradient sums as bare aten::add ops on
    # the autograd thread; 2020 traces record only their launches.
    t = kinetolens.load(TRACES / RESNET)
    bwd_tid = t.ops.filter(pl.col("direction") == "bprop")["tid"].mode()[0]
    bare = t.ops.filter((pl.col("tid") == bwd_tid) & pl.col("parent_id").is_null() & (pl.col("name") == "aten::add"))
    assert bare.height == 96
    assert set(bare["direction"].cast(pl.String).to_list()) == {"bprop"}
    assert set(bare["grad_fn"].to_list()) == {"CudnnConvolutionBackward"}
    legacy = kinetolens.load(TRACES / LEGACY)
    gap = legacy.runtime.filter(pl.col("op_link") == "after_backward_node")
    assert gap.height == 102
    ops = legacy.ops.filter(pl.col("op_id").is_in(gap["op_id"].implode()))
    assert set(ops["name"].to_list()) == {"CudnnConvolutionBackward", "AddmmBackward"}
    # AccumulateGrad is engine work too, not forward.
    acc = legacy.ops.filter(pl.col("name") == "torch::autograd::AccumulateGrad")
    assert set(acc["direction"].cast(pl.String).to_list()) == {"bprop"}


def test_external_id_copied_from_correlation_names_no_op() -> None:
    t = kinetolens.load(TRACES / "hta/trace_diff/test/test.json.gz")
    orphans = t.kernels.filter(pl.col("launch_id").is_null())
    assert orphans.height == 614
    assert (orphans["external_id"] == orphans["correlation"]).all()
    assert orphans["op_id"].null_count() == orphans.height


def test_inductor_generated_modules_are_not_user_code() -> None:
    # Inductor's wrapper modules live in its cache dir, wherever
    # $TORCHINDUCTOR_CACHE_DIR puts it; the user's own files stay user code.
    from kinetolens.model.frames import user_frame

    generated = "cwqky5" + "a1b2c3d4e5" * 5 + ".py"
    assert user_frame(f"/tmp/torchinductor_root/wq/{generated}(85): call") is None
    assert user_frame(f"/scratch/my_cache/wq/{generated}(85): call") is None
    assert user_frame("/home/u/train.py(85): forward") == "/home/u/train.py:85"
    assert user_frame("/home/u/ab/cache.py(3): f") == "/home/u/ab/cache.py:3"
