"""Raw tables to the attributed trace model: explicit links as columns.

Links built here (each a column, not an object graph):

* kernel -> launch (runtime/driver call) by ``correlation``;
* launch -> op by ``External id`` when that op really encloses the launch on
  the same thread, else by time containment on that thread (PyTorch >= 2
  traces often carry mismatched ids, which is why other tools show 0 device
  time for them);
* op -> parent op / top-level op (per-thread nesting);
* op -> nn.Module path and user source line (python_function ranges);
* op -> direction (fprop/bprop/optimizer/other) and, for backward ops, the
  forward op they differentiate (``fwdbwd`` flows, else sequence numbers);
* everything -> profiler step.
"""

from __future__ import annotations

import polars as pl

from kinetolens.errors import TraceWarning
from kinetolens.ingest.categories import ANNOTATION, GPU_ACTIVITY, OP, PYTHON, RUNTIME, SYNC
from kinetolens.ingest.kineto import RawTables
from kinetolens.model import direction as dirn
from kinetolens.model.frames import (
    is_module_frame,
    module_name,
    source_from_call_stack,
    user_frame,
)
from kinetolens.model.nesting import enclosing
from kinetolens.model.steps import assign_steps, build_steps
from kinetolens.model.trace import Trace

I64 = pl.Int64


def _thread_key() -> pl.Expr:
    return pl.struct(pl.col("pid").fill_null(-1), pl.col("tid").fill_null(-1)).hash()


def build_trace(raw: RawTables, path: str) -> Trace:
    host = raw.host.with_columns(end=pl.col("ts") + pl.col("dur"), group=_thread_key())
    ops = (
        host.filter(pl.col("kind").is_in([OP, ANNOTATION]))
        .sort(["ts", "dur"], descending=[False, True], maintain_order=True)
        .with_row_index("op_id")
        .with_columns(pl.col("op_id").cast(I64))
    )
    runtime = (
        host.filter(pl.col("kind").is_in([RUNTIME, SYNC]))
        .sort("ts", maintain_order=True)
        .with_row_index("launch_id")
        .with_columns(pl.col("launch_id").cast(I64))
    )
    python = (
        host.filter(pl.col("kind") == PYTHON)
        .sort(["ts", "dur"], descending=[False, True], maintain_order=True)
        .with_row_index("py_row")
    )

    ops, runtime, overlaps = _nest_ops(ops, runtime)
    ops, runtime = _attach_python(ops, runtime, python)
    ops = _directions(ops, raw.flows)
    runtime = _link_launches(runtime, ops)
    kernels = _link_kernels(raw.device, runtime, ops)
    steps = build_steps(ops, kernels)
    ops, runtime, kernels = assign_steps(steps, ops, runtime, kernels)

    warnings = list(raw.warnings)
    if overlaps:
        warnings.append(
            TraceWarning("ranges overlap without nesting", overlaps, "kept, attached to the range they start in")
        )
    return Trace(
        path=path,
        format=raw.format,
        metadata=raw.metadata,
        ops=ops.drop("group"),
        runtime=runtime.drop("group"),
        kernels=kernels,
        python=python.drop("group", "py_row"),
        memory=raw.memory,
        flows=raw.flows,
        steps=steps,
        device_events=raw.device.filter(~pl.col("kind").is_in(GPU_ACTIVITY)),
        threads=raw.threads,
        processes=raw.processes,
        warnings=warnings,
    )


def _nest_ops(ops: pl.DataFrame, runtime: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Parent/depth/top-level op for ops, and the innermost op of each launch."""
    n_ops = ops.height
    frame = pl.concat(
        [
            ops.select(pl.col("op_id").alias("row"), "group", "ts", "end", pl.lit(True).alias("container")),
            runtime.select(
                (pl.col("launch_id") + n_ops).alias("row"), "group", "ts", "end", pl.lit(False).alias("container")
            ),
        ]
    )
    nest = enclosing(frame, is_container="container")
    parent = pl.Series("parent_id", nest.parent[:n_ops], dtype=I64).replace(-1, None)
    depth = pl.Series("depth", nest.depth[:n_ops], dtype=I64)
    ops = ops.with_columns(parent, depth)
    # Top-level op: the outermost ancestor that is an operator (annotations
    # such as ProfilerStep#N are not ops).  Ancestors precede children in ts
    # order, so one pass suffices.
    parents = ops["parent_id"].to_list()
    kinds = ops["kind"].cast(pl.String).to_list()
    top: list[int | None] = [None] * n_ops
    for i in range(n_ops):
        p = parents[i]
        up = top[p] if p is not None else None
        top[i] = up if up is not None else (i if kinds[i] == OP else None)
    ops = ops.with_columns(pl.Series("top_op_id", top, dtype=I64))
    launch_parent = pl.Series("contained_op_id", nest.parent[n_ops:], dtype=I64).replace(-1, None)
    runtime = runtime.with_columns(launch_parent)
    return ops, runtime, nest.overlaps


def _attach_python(
    ops: pl.DataFrame, runtime: pl.DataFrame, python: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """nn.Module path and user source line for ops and launches."""
    call_stack_source = pl.col("call_stack").map_elements(source_from_call_stack, return_dtype=pl.String)
    if python.height == 0:
        ops = ops.with_columns(module=pl.lit(None, pl.String), source=call_stack_source)
        runtime = runtime.with_columns(module=pl.lit(None, pl.String), source=pl.lit(None, pl.String))
        return ops, runtime
    n_py, n_ops = python.height, ops.height
    frame = pl.concat(
        [
            python.select(pl.col("py_row").cast(I64).alias("row"), "group", "ts", "end", pl.lit(True).alias("c")),
            ops.select((pl.col("op_id") + n_py).alias("row"), "group", "ts", "end", pl.lit(False).alias("c")),
            runtime.select(
                (pl.col("launch_id") + n_py + n_ops).alias("row"), "group", "ts", "end", pl.lit(False).alias("c")
            ),
        ]
    )
    nest = enclosing(frame, is_container="c")
    names = python["name"].to_list()
    module_of: list[str | None] = [None] * n_py
    source_of: list[str | None] = [None] * n_py
    # Rows are in ts order, so a frame's parent is resolved before it.
    for i in range(n_py):
        p = nest.parent[i]
        parent_module = module_of[p] if p >= 0 else None
        parent_source = source_of[p] if p >= 0 else None
        name = names[i] or ""
        if is_module_frame(name):
            short = module_name(name)
            module_of[i] = f"{parent_module}.{short}" if parent_module else short
        else:
            module_of[i] = parent_module
        source_of[i] = user_frame(name) or parent_source

    def lookup(values: list[str | None], start: int, count: int) -> list[str | None]:
        out: list[str | None] = []
        for row in range(start, start + count):
            p = nest.parent[row]
            out.append(values[p] if p >= 0 else None)
        return out

    ops = ops.with_columns(
        pl.Series("module", lookup(module_of, n_py, n_ops), dtype=pl.String),
        pl.Series("source", lookup(source_of, n_py, n_ops), dtype=pl.String),
    ).with_columns(pl.coalesce("source", call_stack_source).alias("source"))
    runtime = runtime.with_columns(
        pl.Series("module", lookup(module_of, n_py + n_ops, runtime.height), dtype=pl.String),
        pl.Series("source", lookup(source_of, n_py + n_ops, runtime.height), dtype=pl.String),
    )
    return ops, runtime


def _directions(ops: pl.DataFrame, flows: pl.DataFrame) -> pl.DataFrame:
    """Direction of every op; forward op, module and source for backward ops."""
    names = ops["name"].to_list()
    kinds = ops["kind"].cast(pl.String).to_list()
    parents = ops["parent_id"].to_list()
    seqs = ops["sequence_number"].to_list()
    n = ops.height
    direction: list[str] = [""] * n
    bwd_root: list[int | None] = [None] * n
    for i in range(n):
        p = parents[i]
        own = dirn.own_direction(names[i] or "", kinds[i])
        direction[i] = dirn.inherit(direction[p] if p is not None else None, own)
        if direction[i] == dirn.BPROP:
            up = bwd_root[p] if p is not None else None
            bwd_root[i] = up if up is not None else i

    # Forward op of each backward root: flows first, then sequence numbers.
    fwd_of_root = _fwdbwd_pairs(ops, flows)
    depth = ops["depth"].to_list()
    by_seq: dict[int, int] = {}
    for i in range(n):
        s = seqs[i]
        if s is None or direction[i] != dirn.FPROP or kinds[i] != OP:
            continue
        best = by_seq.get(s)
        # The op that created the autograd node is the deepest one carrying
        # the sequence number (aten::convolution inside aten::conv2d).
        if best is None or depth[i] >= depth[best]:
            by_seq[s] = i
    fwd_op: list[int | None] = [None] * n
    for i in range(n):
        root = bwd_root[i]
        if root is None:
            continue
        f = fwd_of_root.get(root)
        if f is None:
            # Walk up from the root to the first range that has a sequence number.
            j: int | None = root
            while j is not None and f is None:
                s = seqs[j]
                if s is not None and (names[j] or "").find("Backward") >= 0:
                    f = by_seq.get(s)
                j = parents[j]
            if f is None:
                # The wrapper's child (e.g. MmBackward0) may carry it instead.
                s = seqs[root]
                f = by_seq.get(s) if s is not None else None
            fwd_of_root[root] = f  # type: ignore[assignment]
        fwd_op[i] = f
    grad_fn = [names[r] if r is not None else None for r in bwd_root]
    ops = ops.with_columns(
        pl.Series("direction", direction, dtype=pl.Categorical()),
        pl.Series("fwd_op_id", fwd_op, dtype=I64),
        pl.Series("grad_fn", grad_fn, dtype=pl.String),
    )
    # Backward ops run on the autograd thread, outside any module range:
    # they take module and source from their forward op, as PyProf did.
    fwd = ops.select(
        pl.col("op_id").alias("fwd_op_id"),
        pl.col("module").alias("fwd_module"),
        pl.col("source").alias("fwd_source"),
        pl.col("name").alias("fwd_op"),
    )
    return (
        ops.join(fwd, on="fwd_op_id", how="left")
        .with_columns(
            pl.coalesce("module", "fwd_module").alias("module"),
            pl.coalesce("source", "fwd_source").alias("source"),
        )
        .drop("fwd_module", "fwd_source")
        .sort("op_id")
    )


def _fwdbwd_pairs(ops: pl.DataFrame, flows: pl.DataFrame) -> dict[int, int | None]:
    """Backward op -> forward op from Kineto ``fwdbwd`` flows.

    A flow endpoint sits at the start of its op on its thread; where several
    ops start at that instant, the one carrying a sequence number wins.
    """
    fb = flows.filter(pl.col("cat") == "fwdbwd")
    if fb.height == 0:
        return {}
    keyed = ops.select(
        "op_id", "pid", "tid", "ts", has_seq=pl.col("sequence_number").is_not_null(), depth="depth"
    ).sort(["has_seq", "depth"], descending=[True, True])
    ends = fb.select("ph", "id", "pid", "tid", "ts").join(keyed, on=["pid", "tid", "ts"], how="inner")
    ends = ends.unique(subset=["ph", "id"], keep="first", maintain_order=True)
    start = ends.filter(pl.col("ph") == "s").select("id", fwd="op_id")
    finish = ends.filter(pl.col("ph") == "f").select("id", bwd="op_id")
    pairs = finish.join(start, on="id", how="inner")
    result: dict[int, int | None] = {}
    for bwd, fwd in zip(pairs["bwd"].to_list(), pairs["fwd"].to_list()):
        result[bwd] = fwd
    return result


def _link_launches(runtime: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Launch -> op: External id where it is consistent, else containment."""
    by_id = ops.filter(pl.col("external_id").is_not_null()).select(
        pl.col("external_id"),
        pl.col("op_id").alias("id_op"),
        pl.col("pid").alias("id_pid"),
        pl.col("tid").alias("id_tid"),
        pl.col("ts").alias("id_ts"),
        pl.col("end").alias("id_end"),
    ).unique(subset=["external_id"], keep="first")
    runtime = runtime.join(by_id, on="external_id", how="left")
    consistent = (
        (pl.col("id_pid") == pl.col("pid"))
        & (pl.col("id_tid") == pl.col("tid"))
        & (pl.col("id_ts") <= pl.col("ts"))
        & (pl.col("ts") < pl.col("id_end"))
    )
    return runtime.with_columns(
        op_id=pl.when(consistent).then(pl.col("id_op")).otherwise(pl.col("contained_op_id")),
        op_link=pl.when(consistent)
        .then(pl.lit("external_id"))
        .when(pl.col("contained_op_id").is_not_null())
        .then(pl.lit("containment"))
        .otherwise(pl.lit(None, pl.String)),
    ).drop("id_op", "id_pid", "id_tid", "id_ts", "id_end").sort("launch_id")


def _link_kernels(device: pl.DataFrame, runtime: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    gpu = device.filter(pl.col("kind").is_in(GPU_ACTIVITY)).sort("ts")
    gpu = gpu.with_row_index("kernel_id").with_columns(pl.col("kernel_id").cast(I64))
    launches = runtime.filter(pl.col("correlation").is_not_null()).select(
        "correlation",
        "launch_id",
        pl.col("name").alias("launch"),
        pl.col("ts").alias("launch_ts"),
        pl.col("op_id").alias("launch_op_id"),
        pl.col("module").alias("launch_module"),
        pl.col("source").alias("launch_source"),
        pl.col("tid").alias("launch_tid"),
    ).unique(subset=["correlation"], keep="first")
    gpu = gpu.join(launches, on="correlation", how="left")
    # Old traces (and launches outside the profiled window) may lack the
    # runtime event; their kernels still carry the op's External id.
    ext = ops.filter(pl.col("external_id").is_not_null() & (pl.col("external_id") != 0)).select(
        "external_id", ext_op_id="op_id"
    ).unique(subset=["external_id"], keep="first")
    gpu = gpu.join(ext, on="external_id", how="left").with_columns(
        op_id=pl.coalesce("launch_op_id", pl.when(pl.col("launch_id").is_null()).then(pl.col("ext_op_id")))
    ).drop("ext_op_id", "launch_op_id")
    op_cols = ops.select(
        "op_id",
        op=pl.col("name"),
        top_op_id="top_op_id",
        op_module=pl.col("module"),
        op_source=pl.col("source"),
        direction="direction",
        grad_fn="grad_fn",
        fwd_op_id="fwd_op_id",
        fwd_op="fwd_op",
    )
    tops = ops.select(top_op_id="op_id", top_op="name")
    gpu = (
        gpu.join(op_cols, on="op_id", how="left")
        .join(tops, on="top_op_id", how="left")
        .with_columns(
            module=pl.coalesce("op_module", "launch_module"),
            source=pl.coalesce("op_source", "launch_source"),
        )
        .drop("op_module", "op_source", "launch_module", "launch_source")
        .sort("kernel_id")
    )
    # Number the kernels of one op call in launch order (linear backward
    # reads as sub 0 = dgrad, sub 1 = wgrad, as in PyProf).
    gpu = gpu.with_columns(
        sub=pl.when(pl.col("op_id").is_not_null())
        .then(pl.col("launch_ts").fill_null(pl.col("ts")).rank("ordinal").over("op_id") - 1)
        .cast(I64)
    )
    return gpu
