"""Raw tables to the attributed trace model: explicit links as columns.

Links built here (each a column, not an object graph):

* kernel -> launch (runtime/driver call) by ``correlation``;
* launch -> op by ``External id`` when that op really encloses the launch on
  the same thread, else by time containment on that thread (PyTorch >= 2
  traces often carry mismatched ids, which is why other tools show 0 device
  time for them);
* op -> parent op / top-level op (per-thread nesting);
* op -> nn.Module path (python_function ranges) and user source: the call
  line (``Call stack`` args) or else the enclosing user function;
* op -> direction (fprop/bprop/optimizer/other) and, for backward ops, the
  forward op they differentiate (``fwdbwd`` flows, else sequence numbers);
* everything -> profiler step.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinetolens.errors import TraceWarning
from kinetolens.ingest.categories import (
    ANNOTATION,
    GPU_ACTIVITY,
    NAME_TYPED_DEVICE_CATS,
    OP,
    PYTHON,
    RUNTIME,
    SYNC,
    device_kind,
)
from kinetolens.ingest.kineto import RawTables
from kinetolens.ingest.kineto_values import nulls
from kinetolens.model import direction as dirn
from kinetolens.model.autograd_order import pair_by_order
from kinetolens.model.backward_names import fits
from kinetolens.model.frames import MODULE_PREFIX, enclosing_function, per_distinct, source_from_call_stack
from kinetolens.model.earlier_launches import FLAG as FROM_NEXT_ITERATION
from kinetolens.model.graph_replay import mark_replays
from kinetolens.model.nesting import enclosing, nearest_marked, outermost_marked
from kinetolens.model.schema import conform_trace
from kinetolens.model.steps import assign_steps, build_steps
from kinetolens.model.trace import Trace

I64 = pl.Int64


def _thread_key() -> pl.Expr:
    return pl.struct(pl.col("pid").fill_null(-1), pl.col("tid").fill_null(-1)).hash()


#: What a runtime/driver call carries; the op arguments (shapes, stacks,
#: collectives, sequence numbers) are never set on one, and a column of nulls
#: still costs 8 bytes a row.
RUNTIME_COLUMNS = ["kind", "cat", "name", "pid", "tid", "ts", "dur", "end", "group", "external_id", "correlation", "cbid", "kernel"]
#: Op columns a reader may fill itself (``kinetolens.ingest.nsys_markers``).
SUPPLIED_COLUMNS = ("module", "source")
#: Launch-only fields, never set on an op.
LAUNCH_ONLY_COLUMNS = ["correlation", "cbid", "kernel"]


def build_trace(raw: RawTables, path: str) -> Trace:
    """Link the raw tables into the model.

    Consumes ``raw.host`` and ``raw.device``: their rows move into ops,
    runtime and python, and kernels and device events, and each raw table is
    dropped as soon as they are copied out, so that it does not add to the
    peak.  The result has exactly the columns of
    :mod:`kinetolens.model.schema` (:class:`~kinetolens.model.schema.SchemaMismatch`
    otherwise); the loader's steps after it (:mod:`kinetolens.loader`) return
    new Traces.
    """
    split = _split_rows(
        _take_host(raw),
        {
            "ops": (pl.col("kind").is_in([OP, ANNOTATION]), True, None),
            "runtime": (pl.col("kind").is_in([RUNTIME, SYNC]), False, RUNTIME_COLUMNS),
            "python": (pl.col("kind") == PYTHON, True, None),
        },
    )
    ops = split.pop("ops").drop(LAUNCH_ONLY_COLUMNS).with_row_index("op_id").with_columns(pl.col("op_id").cast(I64))
    runtime = split.pop("runtime").with_row_index("launch_id").with_columns(pl.col("launch_id").cast(I64))
    python = split.pop("python").with_row_index("py_row")

    ops, runtime, overlaps = _nest_ops(ops, runtime)
    # A reader may name an op's module and call site itself (nsys ranges
    # written by kinetolens.nvtx); those win over Python frames.
    supplied = ops.select(SUPPLIED_COLUMNS)
    ops, runtime, python_module = _attach_python(ops.drop(supplied.columns), runtime, python)
    ops = ops.with_columns(pl.coalesce(pl.lit(supplied[c]), c).alias(c) for c in supplied.columns)
    ops, mismatched = _directions(ops, raw.flows)
    runtime = _link_launches(runtime, ops)
    activity = pl.col("kind").is_in(GPU_ACTIVITY)
    device = _split_rows(
        _typed_by_name(_take_device(raw)),
        {"kernels": (activity, False, None), "device_events": (~activity, False, None)},
    )
    kernels = _link_kernels(device.pop("kernels"), runtime, ops)
    device_events = device.pop("device_events")
    steps = build_steps(ops, kernels)
    ops, runtime, kernels = assign_steps(steps, ops, runtime, kernels)
    ops, kernels = mark_replays(ops, kernels)
    ops = ops.with_columns(pl.lit(False).alias(FROM_NEXT_ITERATION))  # set by the loader's later step

    warnings = list(raw.warnings)
    if overlaps:
        warnings.append(
            TraceWarning("ranges overlap without nesting", overlaps, "kept, attached to the range they start in")
        )
    if mismatched:
        warnings.append(
            TraceWarning(
                "backward ops whose sequence number names an op of another kind",
                mismatched,
                "left without a forward op (e.g. NativeLayerNormBackward0 -> aten::addmm)",
            )
        )
    return conform_trace(Trace(
        path=path,
        format=raw.format,
        metadata=raw.metadata,
        ops=ops.drop("group"),
        runtime=runtime.drop("group"),
        kernels=kernels,
        python=python.drop("group", "py_row").with_columns(python_module),
        memory=raw.memory,
        flows=raw.flows,
        steps=steps,
        device_events=device_events,
        threads=raw.threads,
        processes=raw.processes,
        warnings=warnings,
    ))


def _with_supplied(host: pl.DataFrame) -> pl.DataFrame:
    """The raw host table with the op columns a reader may fill itself
    (:data:`SUPPLIED_COLUMNS`), null where this reader does not."""
    missing = [c for c in SUPPLIED_COLUMNS if c not in host.columns]  # a raw table: readers differ
    return host.with_columns(nulls(host.height, pl.String()).alias(c) for c in missing)


def _typed_by_name(device: pl.DataFrame) -> pl.DataFrame:
    """Device events of categories that mix compute, copies and waits (MTIA),
    typed by name: see :func:`kinetolens.ingest.categories.device_kind`.

    Other traces pass through untouched (one look at the distinct categories).
    """
    cats = {str(c).lower() for c in device["cat"].unique().to_list() if c is not None}
    if not cats.intersection(NAME_TYPED_DEVICE_CATS):
        return device
    kind = device_kind(pl.col("cat"), pl.col("name"), pl.col("kind")).cast(device.schema["kind"])
    return device.with_columns(kind.alias("kind"))


def _take_host(raw: RawTables) -> pl.DataFrame:
    """``raw.host`` with each range's end and thread key, taken out of ``raw``
    (left empty there): the caller then holds the only reference."""
    host, raw.host = raw.host, raw.host.clear()
    # Stacked as computed columns: the reader's table is in one chunk per piece
    # of the file, and ``with_columns`` of an expression first copied every
    # column into one chunk (a second host table at the peak).
    end = (host.get_column("ts") + host.get_column("dur")).alias("end")
    group = host.select(_thread_key().alias("group")).to_series()
    return _with_supplied(host).hstack([end, group])


def _take_device(raw: RawTables) -> pl.DataFrame:
    """``raw.device``, taken out of ``raw`` (left empty there): the caller
    then holds the only reference and can drop it once kernels are made."""
    device, raw.device = raw.device, raw.device.clear()
    return device


def _split_rows(table: pl.DataFrame, parts: dict[str, tuple[pl.Expr, bool, list[str] | None]]) -> dict[str, pl.DataFrame]:
    """The rows each part's expression selects from ``table`` (a reader's host
    or device table), by start time (``longest_first``: ranges starting
    together put the enclosing, longer one first, which nesting relies on),
    with the part's columns (None: all).

    The reader's tables are the widest a trace has (shapes, call stacks; a
    kernel's launch configuration) and are consumed: each column is gathered
    into every part that has it and then let go, so the peak holds the table
    and one column's copies, not the table and every part whole.  Each order
    is computed on the narrow key columns alone and applied once (filtering
    and then sorting copied every column twice).  Columns no event filled
    (Python ids in a trace without a stack, say) are made anew rather than
    gathered: gathering nulls writes a buffer of them, while a fresh null
    column's pages are never touched.
    """
    orders = {}
    for name, (keep, longest_first, _) in parts.items():
        by = ["ts", "dur"] if longest_first else ["ts"]
        # On a frame of the columns the order reads: a query on the whole
        # table first copies every column into chunks that line up.
        narrow = pl.DataFrame([table.get_column(c) for c in dict.fromkeys([*keep.meta.root_names(), *by])])
        orders[name] = (
            narrow.with_row_index("row")
            .filter(keep)
            .sort(by, descending=[False, True][: len(by)], maintain_order=True)
            .get_column("row")
        )
    names, schema = table.columns, table.schema
    # Held as Series, not as a frame: dropping a column from a frame whose
    # columns are chunked differently copied every other one.
    columns = table.get_columns()
    del table
    gathered: dict[str, dict[str, pl.Series]] = {name: {} for name in parts}
    for c in names:
        column = columns.pop(0)
        empty = column.null_count() == column.len()
        if column.dtype == pl.String and not empty:
            # One chunk first: polars' gather over a column in many chunks
            # (one per piece of the file) copies every row's text, where a
            # gather over one chunk keeps sharing the texts stored once
            # (``kinetolens.ingest.kineto_values.shared_texts``): 53 MiB
            # instead of 3 for the kernel names of a 500 MB trace.
            column = column.rechunk()
        for name, (_, _, wanted) in parts.items():
            if wanted is None or c in wanted:
                order = orders[name]
                gathered[name][c] = nulls(order.len(), schema[c]).alias(c) if empty else column.gather(order)
        del column  # its buffers go unless a part's column still points into them
    return {name: pl.DataFrame([cols[c] for c in (parts[name][2] or names)]) for name, cols in gathered.items()}


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
    parent = nest.parent[:n_ops].replace(-1, None).alias("parent_id")
    depth = nest.depth[:n_ops].alias("depth")
    ops = ops.with_columns(parent, depth)
    # Top-level op: the outermost ancestor-or-self that is an operator
    # (annotations such as ProfilerStep#N are not ops); rows are op_ids.
    ops = ops.with_columns(outermost_marked(ops["parent_id"], ops["kind"] == OP).alias("top_op_id"))
    launch_parent = nest.parent[n_ops:].replace(-1, None).alias("contained_op_id")
    runtime = runtime.with_columns(launch_parent)
    return ops, runtime, nest.overlaps


def _attach_python(
    ops: pl.DataFrame, runtime: pl.DataFrame, python: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.Series]:
    """nn.Module path and user source line for ops and launches, and the
    module path of each Python frame (a module frame's own path)."""
    call_stack_source = pl.lit(per_distinct(ops["call_stack"], source_from_call_stack))
    if python.height == 0:
        ops = ops.with_columns(module=pl.lit(None, pl.String), source=call_stack_source)
        runtime = runtime.with_columns(module=pl.lit(None, pl.String), source=pl.lit(None, pl.String))
        return ops, runtime, pl.Series("module", [], pl.String)
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
    module_of, source_of = _frame_paths(python["name"], nest.parent[:n_py])

    # Each op and launch takes the values of its enclosing Python frame; -1
    # (no frame) points at the null appended after the frames' values.
    modules = module_of.extend_constant(None, 1)
    sources = source_of.extend_constant(None, 1)

    def lookup(values: pl.Series, name: str, start: int, count: int) -> pl.Series:
        return values.gather(nest.parent.slice(start, count).replace(-1, n_py)).alias(name)

    # A call stack holds the exact call line; a frame only its function.
    ops = ops.with_columns(
        lookup(modules, "module", n_py, n_ops), lookup(sources, "source", n_py, n_ops)
    ).with_columns(pl.coalesce(call_stack_source, "source").alias("source"))
    runtime = runtime.with_columns(
        lookup(modules, "module", n_py + n_ops, runtime.height),
        lookup(sources, "source", n_py + n_ops, runtime.height),
    )
    return ops, runtime, module_of


def _frame_paths(names: pl.Series, parent: pl.Series) -> tuple[pl.Series, pl.Series]:
    """For each Python frame (``parent``: the enclosing frame's row, -1 at
    the top): the dotted nn.Module path and the innermost user source line
    at that frame, each inherited from the frames around it.

    Whole columns, no Python step per frame: a trace taken with stacks has
    a frame event for every module call and function of every step.
    ``enclosing_function`` runs once per distinct frame name; the source is
    the nearest user frame, as ``in func (file:line)`` (pointer jumping); a
    module's path is its short name prefixed by the paths of the module
    frames around it, joined by pointer jumping too (each round prefixes the
    path of the module frame as far above as the last round reached,
    doubling the reach).
    """
    parent = parent.replace(-1, None)
    user = per_distinct(names, enclosing_function)
    source_row = nearest_marked(parent, user.is_not_null())
    source = user.gather(source_row)

    is_module = names.str.starts_with(MODULE_PREFIX).fill_null(False)
    module_row = nearest_marked(parent, is_module)
    # The module frame enclosing each module frame, among module frames only.
    modules = pl.DataFrame({"row": module_row, "up": module_row.gather(parent)}).filter(is_module)
    position = pl.Series(pl.repeat(None, names.len(), dtype=pl.Int64, eager=True)).scatter(
        modules["row"], pl.int_range(0, modules.height, eager=True)
    )
    path = names.filter(is_module).str.slice(len(MODULE_PREFIX))
    jump = position.gather(modules["up"])
    while jump.null_count() < jump.len():
        path = pl.select(
            pl.when(jump.is_not_null()).then(pl.concat_str(path.gather(jump), pl.lit("."), path)).otherwise(path)
        ).to_series()
        jump = jump.gather(jump)
    module = path.gather(position.gather(module_row))
    return module.alias("module"), source.alias("source")


def _directions(ops: pl.DataFrame, flows: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Direction of every op; forward op, module and source for backward ops.

    Also returns how many backward nodes were left unlinked because the only
    forward op found was of another kind (:mod:`kinetolens.model.backward_names`).
    """
    direction, bwd_root = _backward_roots(ops)
    fwd_op, fwd_link, mismatched = _forward_ops(ops, flows, direction, bwd_root)
    ops = ops.with_columns(
        direction.cast(pl.Categorical()).alias("direction"),
        fwd_op.alias("fwd_op_id"),
        fwd_link.alias("fwd_link"),
        ops["name"].gather(bwd_root).alias("grad_fn"),
    )
    # Backward ops run on the autograd thread, outside any module range:
    # they take module and source from their forward op, as PyProf did.
    fwd = ops.select(
        pl.col("op_id").alias("fwd_op_id"),
        pl.col("module").alias("fwd_module"),
        pl.col("source").alias("fwd_source"),
        pl.col("name").alias("fwd_op"),
    )
    # Joined on the narrow columns and attached in op order: joining (and
    # re-sorting) the wide op table would copy every column of it.
    inherited = (
        ops.select("fwd_op_id", "module", "source")
        .join(fwd, on="fwd_op_id", how="left", maintain_order="left")
        .select(
            pl.coalesce("module", "fwd_module").alias("module"),
            pl.coalesce("source", "fwd_source").alias("source"),
            "fwd_op",
        )
    )
    ops = ops.with_columns(inherited.get_columns())
    return _recompute(ops, own_module=fwd["fwd_module"], bwd_root=bwd_root), mismatched


def _recompute(ops: pl.DataFrame, *, own_module: pl.Series, bwd_root: pl.Series) -> pl.DataFrame:
    """Backward ops that recompute a forward (a module frame of their own
    under a backward node that has none) become ``recompute``, under the
    full path of their module (:func:`kinetolens.model.direction.full_module_path`).

    ``own_module``: each op's module from its own Python frames, before
    backward ops inherit their forward op's."""
    node_module = own_module.gather(bwd_root)
    again = (ops["direction"].cast(pl.String) == dirn.BPROP) & own_module.is_not_null() & node_module.is_null()
    if not again.any():
        return ops
    forward = ops["module"].filter(ops["direction"].cast(pl.String) == dirn.FPROP).drop_nulls().unique().to_list()
    near = ops["module"].gather(bwd_root)
    full = {
        (m, n): dirn.full_module_path(m, forward, n)
        for m, n in pl.DataFrame({"m": own_module, "n": near}).filter(again).unique().iter_rows()
    }
    module = [
        full[(m, n)] if a else cur
        for a, m, n, cur in zip(again.to_list(), own_module.to_list(), near.to_list(), ops["module"].to_list())
    ]
    return ops.with_columns(
        pl.when(again).then(pl.lit(dirn.RECOMPUTE)).otherwise(pl.col("direction").cast(pl.String))
        .cast(pl.Categorical()).alias("direction"),
        pl.Series("module", module, dtype=pl.String),
    )


def _backward_roots(ops: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """Direction of every op, and the backward node each backward op belongs to.

    Backward and optimizer ranges claim everything inside them, so an op's
    direction is that of its outermost backward-or-optimizer ancestor (or
    its own), and a backward op's node is that ancestor.  Ops the engine runs
    between two nodes outside any range (see ``_engine_gap_owners``) are
    backward and belong to the node before them.  Rows are ``op_id``s here.
    """
    labels = [dirn.FPROP, dirn.BPROP, dirn.OPTIMIZER, dirn.OTHER]
    own = ops.select(
        dirn.own_direction(pl.col("name"), pl.col("kind").cast(pl.String), dirn.pytorch_names(ops["name"]))
        .cast(pl.Enum(labels))
    ).to_series()
    owner = _engine_gap_owners(ops, own)
    gap = pl.DataFrame({"op_id": list(owner), "node": list(owner.values())}, schema={"op_id": I64, "node": I64})
    marks = (
        ops.select("op_id", own=own)
        .join(gap, on="op_id", how="left", maintain_order="left")
        .select(
            marked=pl.col("own").is_in([dirn.BPROP, dirn.OPTIMIZER]) | pl.col("node").is_not_null(),
            direction=pl.when(pl.col("node").is_not_null()).then(pl.lit(dirn.BPROP)).otherwise(pl.col("own").cast(pl.String)),
            node=pl.coalesce("node", "op_id"),
        )
    )
    outermost = outermost_marked(ops["parent_id"], marks["marked"])
    claimed = pl.DataFrame(
        {
            "direction": marks["direction"].gather(outermost),
            "node": marks["node"].gather(outermost),
            "own": own.cast(pl.String),
        }
    ).select(
        direction=pl.coalesce("direction", "own"),
        node=pl.when(pl.col("direction") == dirn.BPROP).then("node"),
    )
    return claimed["direction"], claimed["node"]


def _engine_gap_owners(ops: pl.DataFrame, own: pl.Series) -> dict[int, int]:
    """Top-level ops the autograd engine ran between two nodes -> the node before.

    After a node returns, the engine sums the gradients that two branches
    send to one tensor (``aten::add``) and reduces broadcast gradients to
    their input's shape (``aten::sum``); PyTorch 1.8-1.9 record these as bare
    top-level ops on the autograd thread, outside every node.  They finish
    the node before them (newer PyTorch puts them inside that node's
    ``evaluate_function`` range).  Only threads without annotations qualify:
    the engine's worker threads record none, while a thread that also runs
    the training loop (where the gap between two backward passes holds the
    optimizer and the next forward) has step and optimizer ranges.  A CPU
    training loop without step ranges runs both on one thread: there a gap
    that ends a backward pass (the next node is numbered above the last one:
    the engine runs one pass's nodes in decreasing order) and holds ops
    numbered above the last node (they ran after its pass was recorded) is
    the next forward pass, not engine work.  After a thread's last node there
    is no next node: its ops finish that node unless numbered above it.
    """
    tops = (
        ops.select("op_id", "group", "kind", "parent_id", "sequence_number", own=own.cast(pl.String))
        .filter(pl.col("parent_id").is_null())
    )
    annotated = set(tops.filter(pl.col("kind") == ANNOTATION)["group"].to_list())
    owner: dict[int, int] = {}
    last_node: dict[int, int] = {}
    last_seq: dict[int, int] = {}
    pending: dict[int, list[int]] = {}
    newest: dict[int, int] = {}  # the highest number a pending op carries
    rows = zip(tops["op_id"].to_list(), tops["group"].to_list(), tops["own"].to_list(), tops["sequence_number"].to_list())
    for i, g, d, seq in rows:
        if g in annotated:
            continue
        if d == dirn.BPROP:
            node = last_node.get(g)
            last = last_seq.get(g)
            forward = last is not None and seq is not None and seq > last and newest.get(g, -1) > last
            if node is not None and not forward:
                for j in pending.get(g, []):
                    owner[j] = node
            last_node[g] = i
            if seq is not None:
                last_seq[g] = seq
            pending[g] = []
            newest[g] = -1
        elif g in last_node and d == dirn.FPROP:
            pending[g].append(i)
            if seq is not None:
                newest[g] = max(newest.get(g, -1), seq)
    # After a thread's last node (see the docstring).
    for g, node in last_node.items():
        last = last_seq.get(g)
        if last is None or newest.get(g, -1) <= last:
            for j in pending.get(g, []):
                owner[j] = node
    return owner


_PAIRS_SCHEMA = {"root": I64, "fwd_op": I64, "link": pl.String}


def _forward_ops(
    ops: pl.DataFrame, flows: pl.DataFrame, direction: pl.Series, bwd_root: pl.Series
) -> tuple[pl.Series, pl.Series, int]:
    """Forward op of every backward op, how it was found, and how many nodes
    lost their only candidate to the name check.

    ``fwdbwd`` flows first, then autograd sequence numbers; a trace with no
    sequence numbers at all falls back to creation order
    (``kinetolens.model.autograd_order``).  A pair whose forward op cannot
    have created a node of that name is dropped
    (:func:`kinetolens.model.backward_names.fits`).
    """
    roots = bwd_root.drop_nulls().unique().alias("root")
    found = [_fwdbwd_pairs(ops, flows).with_columns(link=pl.lit("fwdbwd_flow"))]
    if ops["sequence_number"].null_count() < ops.height:
        found.append(_sequence_pairs(ops, direction, roots).with_columns(link=pl.lit("sequence_number")))
    else:
        ordered = pair_by_order(ops, direction.to_list(), bwd_root.to_list())
        found.append(
            pl.DataFrame({"root": list(ordered), "fwd_op": list(ordered.values())}, schema={"root": I64, "fwd_op": I64})
            .with_columns(link=pl.lit("creation_order"))
        )
    candidates = _fitting(ops["name"], pl.concat([f.select(list(_PAIRS_SCHEMA)).cast(_PAIRS_SCHEMA) for f in found]))
    # A flow's pair wins over the other rules' pair for the same root.
    pairs = candidates.filter("fits").unique(subset="root", keep="first", maintain_order=True)
    mismatched = candidates["root"].n_unique() - pairs.height
    each = bwd_root.alias("root").to_frame().join(pairs, on="root", how="left", maintain_order="left")
    return each["fwd_op"], each["link"], mismatched


def _fitting(names: pl.Series, pairs: pl.DataFrame) -> pl.DataFrame:
    """``pairs`` with ``fits``: whether the root's name admits the forward op's.

    The check runs once per distinct pair of names (a few hundred at most).
    """
    named = pairs.with_columns(grad_fn=names.gather(pairs["root"]), fwd_name=names.gather(pairs["fwd_op"]))
    verdicts = named.select("grad_fn", "fwd_name").unique()
    verdicts = verdicts.with_columns(
        fits=pl.Series([fits(g, f) for g, f in verdicts.iter_rows()], dtype=pl.Boolean)
    )
    return named.join(verdicts, on=["grad_fn", "fwd_name"], how="left", maintain_order="left").drop(
        "grad_fn", "fwd_name"
    )


def _sequence_pairs(ops: pl.DataFrame, direction: pl.Series, roots: pl.Series) -> pl.DataFrame:
    """Backward root -> the forward op that recorded its sequence number.

    Ops record the counter's value on entry and a node creator then bumps
    it, so the ops carrying one number are the ones run after the previous
    node and, last of all, the creator of this node: the op that starts
    last (aten::convolution inside aten::conv2d, but aten::gather after the
    aten::to that prepared its index).  A root takes the number of its
    nearest ``...Backward`` range (itself or an ancestor) whose number
    names such a creator, else its own (the wrapper's child, e.g.
    MmBackward0, may carry it instead).
    """
    seq = ops["sequence_number"]
    creators = (
        ops.select("op_id", "sequence_number", "kind", direction=direction)
        .filter(pl.col("sequence_number").is_not_null() & (pl.col("direction") == dirn.FPROP) & (pl.col("kind") == OP))
        .group_by("sequence_number")
        .agg(fwd_op=pl.col("op_id").max())
    )
    marked = ops.select(
        (
            pl.col("sequence_number").is_in(creators["sequence_number"].implode())
            & pl.col("name").str.contains("Backward", literal=True)
        ).fill_null(False)
    ).to_series()
    nearest = nearest_marked(ops["parent_id"], marked).gather(roots)
    return (
        pl.DataFrame({"root": roots, "sequence_number": seq.gather(nearest).fill_null(seq.gather(roots))})
        .join(creators, on="sequence_number", how="inner")
        .select("root", "fwd_op")
    )


def _fwdbwd_pairs(ops: pl.DataFrame, flows: pl.DataFrame) -> pl.DataFrame:
    """Backward op -> forward op from Kineto ``fwdbwd`` flows (``root``, ``fwd_op``).

    A flow endpoint sits at the start of its op on its thread; where several
    ops start at that instant, the one carrying a sequence number wins.
    """
    fb = flows.filter(pl.col("cat") == "fwdbwd")
    if fb.height == 0:
        return pl.DataFrame(schema={"root": I64, "fwd_op": I64})
    keyed = ops.select(
        "op_id", "pid", "tid", "ts", has_seq=pl.col("sequence_number").is_not_null(), depth="depth"
    ).sort(["has_seq", "depth"], descending=[True, True])
    ends = fb.select("ph", "id", "pid", "tid", "ts").join(keyed, on=["pid", "tid", "ts"], how="inner")
    ends = ends.unique(subset=["ph", "id"], keep="first", maintain_order=True)
    start = ends.filter(pl.col("ph") == "s").select("id", fwd_op="op_id")
    finish = ends.filter(pl.col("ph") == "f").select("id", root="op_id")
    # One backward op reached by several flows keeps the last one's pair.
    return (
        finish.join(start, on="id", how="inner", maintain_order="left")
        .select("root", "fwd_op")
        .unique(subset="root", keep="last", maintain_order=True)
    )


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
    consistent = (
        (pl.col("id_pid") == pl.col("pid"))
        & (pl.col("id_tid") == pl.col("tid"))
        & (pl.col("id_ts") <= pl.col("ts"))
        & (pl.col("ts") < pl.col("id_end"))
    )
    # Joined on the columns the test needs and attached in launch order, as
    # the other links are: the launch table itself is never joined.
    linked = (
        runtime.select("external_id", "pid", "tid", "ts", "contained_op_id")
        .join(by_id, on="external_id", how="left", maintain_order="left")
        .select(
            op_id=pl.when(consistent).then(pl.col("id_op")).otherwise(pl.col("contained_op_id")),
            op_link=pl.when(consistent)
            .then(pl.lit("external_id"))
            .when(pl.col("contained_op_id").is_not_null())
            .then(pl.lit("containment"))
            .otherwise(pl.lit(None, pl.String)),
        )
    )
    return _link_engine_gaps(runtime.with_columns(linked.get_columns()), ops)


def _link_engine_gaps(runtime: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Launches the autograd engine made between two backward nodes.

    Before PyTorch wrapped each node in ``autograd::engine::evaluate_function:``
    ranges (2020 traces), the engine's own work after a node - summing the
    gradients two branches send to one tensor, reducing a broadcast gradient
    to its input's shape - launched kernels under no op at all: External id 0,
    outside every range.  That work finishes the node that just ran (newer
    traces put it inside that node's ``evaluate_function`` range), so such a
    launch belongs to the backward node before it, provided the next range on
    the thread is a backward node too (the launch sits inside the backward
    pass, not in user code after it).  Where such work was recorded as ops,
    ``_engine_gap_owners`` gives those ops to the same node.
    """
    orphan = (
        pl.col("op_id").is_null()
        & (pl.col("external_id").fill_null(0) == 0)
        & pl.col("kind").is_in([RUNTIME])
    )
    if runtime.filter(orphan).height == 0:
        return runtime
    roots = ops.filter(pl.col("parent_id").is_null())
    # As for ops (``_engine_gap_owners``): only on threads without annotations.
    annotated = roots.filter(pl.col("kind") == ANNOTATION)["group"].unique().implode()
    top = (
        roots.filter(~pl.col("group").is_in(annotated))
        .select("group", "ts", "end", "op_id", bprop=pl.col("direction") == dirn.BPROP)
        .sort("ts")
    )
    query = runtime.filter(orphan).select("launch_id", "group", "ts").sort("ts")
    prev = query.join_asof(
        top.rename({"ts": "prev_ts", "end": "prev_end", "op_id": "prev_op", "bprop": "prev_bprop"}),
        left_on="ts", right_on="prev_ts", by="group", strategy="backward", check_sortedness=False,
    )
    both = prev.join_asof(
        top.select("group", next_ts="ts", next_bprop="bprop"),
        left_on="ts", right_on="next_ts", by="group", strategy="forward", check_sortedness=False,
    )
    gap = both.filter(
        pl.col("prev_bprop") & pl.col("next_bprop") & (pl.col("prev_end") <= pl.col("ts"))
    ).select("launch_id", gap_op="prev_op")
    gap_op = runtime.select("launch_id").join(gap, on="launch_id", how="left", maintain_order="left")["gap_op"]
    return runtime.with_columns(
        op_id=pl.coalesce(pl.col("op_id"), gap_op),
        op_link=pl.when(gap_op.is_not_null()).then(pl.lit("after_backward_node")).otherwise(pl.col("op_link")),
    )


def _link_kernels(gpu: pl.DataFrame, runtime: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """The kernels (GPU activity in start order) with their launch, op and the op's names."""
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
    # The joins run on the two key columns only and their results are
    # attached to the kernels in kernel order: joining the wide kernel table
    # itself would copy every one of its columns at each join.
    linked = gpu.select("correlation", "external_id").join(launches, on="correlation", how="left", maintain_order="left")
    # Old traces (and launches outside the profiled window) may lack the
    # runtime event; their kernels still carry the op's External id.  Some
    # exporters copy the correlation id into External id instead: that number
    # names no op, and matching it against op ids would be a coincidence.
    ext = ops.filter(pl.col("external_id").is_not_null() & (pl.col("external_id") != 0)).select(
        "external_id", ext_op_id="op_id"
    ).unique(subset=["external_id"], keep="first")
    by_ext = pl.col("launch_id").is_null() & (pl.col("external_id") != pl.col("correlation").fill_null(-1))
    linked = linked.join(ext, on="external_id", how="left", maintain_order="left").with_columns(
        op_id=pl.coalesce("launch_op_id", pl.when(by_ext).then(pl.col("ext_op_id")))
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
    linked = (
        linked.join(op_cols, on="op_id", how="left", maintain_order="left")
        .join(tops, on="top_op_id", how="left", maintain_order="left")
        .with_columns(
            module=pl.coalesce("op_module", "launch_module"),
            source=pl.coalesce("op_source", "launch_source"),
        )
        .drop("op_module", "op_source", "launch_module", "launch_source", "correlation", "external_id")
    )
    gpu = gpu.hstack(linked)
    return gpu.with_columns(sub=pl.when(pl.col("op_id").is_not_null()).then(_launch_order(gpu)))


def _launch_order(gpu: pl.DataFrame) -> pl.Series:
    """Each kernel's place among its op call's kernels in launch order (0
    first; kernels of one launch time in table order): linear backward reads
    as sub 0 = dgrad, sub 1 = wgrad, as in PyProf.  Null where no op.

    Numpy over one stable sort: a window rank over the op ids held a hash
    table of every group (100 MiB on a 500 MB trace's 270,000 kernels)."""
    op = gpu["op_id"].fill_null(-1).to_numpy()
    when = gpu.select(pl.col("launch_ts").fill_null(pl.col("ts")))[:, 0].to_numpy()
    rows = np.flatnonzero(op >= 0)
    order = rows[np.lexsort((when[rows], op[rows]))]
    ops = op[order]
    first = np.flatnonzero(np.append(True, ops[1:] != ops[:-1]))
    place = np.zeros(op.size, dtype=np.int64)
    place[order] = np.arange(order.size) - np.repeat(first, np.diff(np.append(first, order.size)))
    return pl.Series("sub", place, dtype=I64)
