"""Kernels replayed from CUDA/HIP graphs, linked to the ops that captured them.

A graph replay (``cudaGraphLaunch``/``hipGraphLaunch``) runs many kernels
under one runtime call: their launch names no op, so they would all take
the range around the launch (an annotation, ``execute_...``).  The ops that
enqueued them ran once, while the graph was captured, and a trace recorded
then (the *capture trace*) holds them.

Pairing is by sequence, not by time (the two traces come from different
runs, and replay GPU clocks may be offset from the CPU's):

* a replay's *nodes* are the kernels (and copies) sharing its launch's
  correlation id, in GPU start order;
* a captured graph's nodes are the launches made on the capturing thread
  between ``*StreamBeginCapture`` and ``*StreamEndCapture``, in order, each
  with the op it ran under; ROCm names the kernel on the launch (``kernel``
  arg), CUDA does not (then nodes are matched by kind and count alone);
* a replay matches the captured graphs holding the same nodes (the same
  names, as many times each); the k-th replay of such a node set takes the
  k-th of those graphs, cycling when graphs are replayed more often than
  captured; within a graph the i-th kernel of a name takes the i-th
  captured launch of that name (robust to kernels of two captured streams
  interleaving differently at replay).

The capture trace's ops that launched paired kernels are appended to the
replay's ops (with their ancestors), one copy per replay (each replay is a
call of them), numbered after the replay's own ops and flagged
``from_capture``; each is an instant (``dur`` 0) at its graph launch, in
the launch's step: at replay they cost no CPU time.  Paired kernels then carry op, module, source, shapes and direction
like eager kernels, so FLOPs and rooflines apply unchanged.

Every kernel says whether it came from a graph: ``graph_id`` and
``graph_node``, both null for eager kernels.  When paired they are the
captured graph's index in the capture trace and the node's position in it;
else the ids the trace recorded (CUDA >= 12 Kineto's ``graph id``/``graph
node id``, nsys' ``graphId``/``graphNodeId``) or, where it recorded none,
the index of the replay's distinct node set (by first replay) and the
kernel's position in the replay.  Recorded ids name the instantiated
graph, not the captured one, so pairing with a capture trace still goes by
sequence.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import polars as pl

from kinetolens.errors import TraceWarning
from kinetolens.ingest.categories import KERNEL
from kinetolens.model.trace import Trace

I64 = pl.Int64

#: Metadata key naming the graph capture trace a replay's kernels were paired with.
CAPTURE_KEY = "graph_capture"
#: Runtime calls that replay a graph.
GRAPH_LAUNCH = r"GraphLaunch"
#: Runtime calls that add a node to a graph being captured.
_NODE_CALL = r"(?i)(launch|memcpy|memset)"
#: Launch-like calls that add no GPU activity (host nodes).
_NOT_A_NODE = r"(?i)(graphlaunch|hostfunc)"
#: Least share of nodes a replay and a captured graph must have in common
#: to be paired when no captured graph holds exactly the replay's nodes.
MIN_SHARED = 0.9
#: A node's name when the capture trace does not name its kernels (CUDA).
_UNNAMED = "<kernel>"


def mark_replays(ops: pl.DataFrame, kernels: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``from_capture`` (false) on ops and ``graph_id``/``graph_node`` on kernels.

    Ids the trace recorded (CUDA >= 12 Kineto, nsys) are kept; other
    replayed kernels are numbered here: ``graph_id`` by distinct node set in
    order of first replay, ``graph_node`` by GPU start within the replay.
    Without a capture trace a replay's kernels stay with the op around the
    launch (the graph's owner); under none, their ``op`` reads
    ``hipGraphLaunch (graph 2)``, with no ``op_id``.
    """
    ops = ops.with_columns(from_capture=pl.lit(False))
    recorded = pl.col("graph_id").fill_null(0) > 0  # CUPTI writes graph id 0 on eager work
    kernels = kernels.with_columns(
        graph_id=pl.when(recorded).then(pl.col("graph_id").cast(I64)),
        graph_node=pl.when(recorded).then(pl.col("graph_node").cast(I64)),
    )
    nodes = _replayed_nodes(kernels, named=True)
    if nodes.height == 0:
        return ops, kernels
    sigs = _signatures(nodes, "launch_id")
    first = sigs.group_by("sig").agg(pl.col("first_ts").min()).sort("first_ts").with_row_index("graph_id")
    launch_graph = sigs.join(first.select("sig", pl.col("graph_id").cast(I64)), on="sig", how="left")
    labels = (
        nodes.join(launch_graph.select("launch_id", "graph_id"), on="launch_id", how="left")
        .join(kernels.select("kernel_id", rec_graph="graph_id", rec_node="graph_node"), on="kernel_id", how="left")
        .select(
            "kernel_id",
            graph_id=pl.coalesce("rec_graph", "graph_id"),
            graph_node=pl.when(pl.col("rec_graph").is_not_null()).then("rec_node").otherwise("position"),
        )
    )
    kernels = set_by_kernel(kernels, labels, ["graph_id", "graph_node"])
    # A replay under no op at all is named by its launch and graph, never
    # left anonymous (its module and source still come from the launch).
    unowned = pl.col("op").is_null() & pl.col("kernel_id").is_in(nodes["kernel_id"].implode())
    named = pl.format("{} (graph {})", pl.col("launch"), pl.col("graph_id"))
    return ops, kernels.with_columns(op=pl.when(unowned).then(named).otherwise(pl.col("op")))


@dataclass
class Paired:
    """What :func:`attach_capture` returns: the replay's new ops and kernels,
    and the replayed kernels it could not place for sure."""

    ops: pl.DataFrame
    kernels: pl.DataFrame
    #: replayed kernels that no captured node matched (they keep the op around their launch)
    unmatched: int = 0
    #: replayed kernels whose kernel set several captured graphs hold with
    #: different op shapes (the same layers captured for several batch
    #: sizes): they took those graphs in turn, so their shapes may be another
    #: capture's
    ambiguous: int = 0


def attach_capture(
    ops: pl.DataFrame, kernels: pl.DataFrame, capture_ops: pl.DataFrame, capture_runtime: pl.DataFrame
) -> Paired:
    """The replay's ops with the capture ops appended and its replayed kernels
    linked to them.

    ``capture_ops``/``capture_runtime``: the tables of the capture trace's
    model.  Replays whose node set no captured graph holds keep the op
    around their launch.
    """
    captured = captured_nodes(capture_runtime)
    named = captured.height > 0 and captured["name"].ne(_UNNAMED).all()
    replayed = _replayed_nodes(kernels, named=named)
    if replayed.height == 0 or captured.height == 0:
        return Paired(ops, kernels, unmatched=replayed.height)
    pairs, candidates = _pair_launches(
        _signatures(replayed, "launch_id"), _signatures(captured, "graph"), replayed, captured
    )
    linked = (
        replayed.join(pairs, on="launch_id", how="inner")
        .join(captured.select("graph", "name", "occurrence", "node", "cap_op_id", "cap_module", "cap_source"),
              on=["graph", "name", "occurrence"], how="inner")
    )
    unmatched = replayed.height - linked.height
    if linked.height == 0:
        return Paired(ops, kernels, unmatched=unmatched)
    ambiguous = _ambiguous_kernels(replayed, pairs, candidates, captured, capture_ops)
    copies = op_copies(linked.select("launch_id", "graph", "cap_op_id"), capture_ops, first_id=ops.height)
    at_launch = kernels.filter(pl.col("kernel_id").is_in(linked["kernel_id"].implode())).group_by("launch_id").agg(
        at=pl.col("launch_ts").first(), at_step=pl.col("step").first()
    )
    appended = appended_ops(copies.join(at_launch, on="launch_id", how="left", maintain_order="left"), capture_ops, ops)
    new_ops = pl.concat([ops, appended], how="vertical_relaxed") if appended.height else ops
    # Each linked kernel -> its op's copy for that replay.
    ids = copies.select("launch_id", "cap_op_id", "op_id")
    linked = linked.join(ids, on=["launch_id", "cap_op_id"], how="left")
    values = copy_values(
        linked.select("kernel_id", "op_id", "cap_module", "cap_source", graph_id="graph", graph_node="node"), new_ops
    )
    kernels = set_by_kernel(kernels, values, ["graph_id", "graph_node"])
    # A node captured outside every op keeps the op around its replay, and
    # takes the module and source of its capture-time launch where known.
    outside = values.filter(pl.col("op_id").is_null())
    for col in ("module", "source"):
        known = outside.filter(pl.col(f"cap_{col}").is_not_null()).select("kernel_id", pl.col(f"cap_{col}").alias(col))
        kernels = set_by_kernel(kernels, known, [col])
    kernels = set_by_kernel(kernels, values.filter(pl.col("op_id").is_not_null()).select("kernel_id", *KERNEL_OP_COLUMNS),
                             KERNEL_OP_COLUMNS)
    sub = (
        pl.when(pl.col("op_id").is_not_null())
        .then(pl.col("launch_ts").fill_null(pl.col("ts")).rank("ordinal").over("op_id") - 1)
        .cast(I64)
    )
    # Replayed kernels share their launch's time: number them by GPU start.
    replay_sub = pl.col("ts").rank("ordinal").over("op_id").cast(I64) - 1
    is_replayed = pl.col("kernel_id").is_in(linked.filter(pl.col("op_id").is_not_null())["kernel_id"].implode())
    kernels = kernels.with_columns(sub=pl.when(is_replayed).then(replay_sub).otherwise(sub))
    return Paired(new_ops, kernels, unmatched=unmatched, ambiguous=ambiguous)


def pair_with_capture(trace: Trace, captured: Trace, capture_name: str) -> Trace:
    """``trace`` with its replayed kernels linked to the ops of ``captured``
    (the capture trace's model, shown as ``capture_name``), named in its
    metadata (:data:`CAPTURE_KEY`), and a warning for the kernels that could
    not be placed for sure.  A step of the loader's pipeline."""
    paired = attach_capture(trace.ops, trace.kernels, captured.ops, captured.runtime)
    warnings = []
    if paired.unmatched:
        warnings.append(
            TraceWarning(
                "replayed kernels without a captured node",
                paired.unmatched,
                f"no graph captured in {capture_name} has their launch's kernels; "
                "kept with the op around the graph launch",
            )
        )
    if paired.ambiguous:
        warnings.append(
            TraceWarning(
                "replayed kernels matching graphs captured with different shapes",
                paired.ambiguous,
                "several captured graphs hold the same kernels with different op shapes (one per batch size?); "
                "replays took them in turn, so their shapes and FLOPs may be another capture's",
            )
        )
    return dataclasses.replace(
        trace,
        ops=paired.ops,
        kernels=paired.kernels,
        metadata={**trace.metadata, CAPTURE_KEY: capture_name},
        warnings=[*trace.warnings, *warnings],
    )


#: The kernel columns that come from the op that launched it.
KERNEL_OP_COLUMNS = ["op_id", "op", "top_op_id", "top_op", "module", "source", "direction", "grad_fn", "fwd_op_id", "fwd_op"]


def copy_values(linked: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """``linked`` (``kernel_id, op_id`` of an op copy, ``cap_module``,
    ``cap_source``: the launch's own) with :data:`KERNEL_OP_COLUMNS` read
    from ``ops``; the op's module and source win over the launch's."""
    op_cols = ops.select(
        "op_id", op="name", top_op_id="top_op_id", op_module="module", op_source="source",
        direction="direction", grad_fn="grad_fn", fwd_op_id="fwd_op_id", fwd_op="fwd_op",
    )
    tops = ops.select(top_op_id="op_id", top_op="name")
    return (
        linked.join(op_cols, on="op_id", how="left")
        .join(tops, on="top_op_id", how="left")
        .with_columns(
            module=pl.coalesce("op_module", "cap_module"),
            source=pl.coalesce("op_source", "cap_source"),
        )
    )


def _ambiguous_kernels(
    replayed: pl.DataFrame, pairs: pl.DataFrame, candidates: pl.DataFrame, captured: pl.DataFrame,
    capture_ops: pl.DataFrame,
) -> int:
    """Replayed kernels of node sets whose candidate graphs differ in their
    ops' shapes (see :attr:`Paired.ambiguous`)."""
    shared = candidates.filter(pl.len().over("sig") > 1)
    if shared.height == 0:
        return 0
    shapes = (
        captured.join(shared, on="graph", how="inner")
        .join(capture_ops.select(cap_op_id="op_id", dims="input_dims"), on="cap_op_id", how="left")
        .sort("graph", "node")
        .group_by("sig", "graph")
        .agg(shape=pl.col("dims").fill_null("").str.join("|").hash())
    )
    mixed = shapes.group_by("sig").agg(kinds=pl.col("shape").n_unique()).filter(pl.col("kinds") > 1)
    launches = pairs.join(mixed.select("sig"), on="sig", how="inner").select("launch_id")
    return replayed.join(launches, on="launch_id", how="inner").height


def captured_nodes(runtime: pl.DataFrame) -> pl.DataFrame:
    """Each captured graph's nodes: ``graph`` (capture order), ``node``
    (launch order), ``name`` (kernel name, or ``<kernel>``/the copy kind),
    ``occurrence`` (of that name in the graph), ``cap_op_id`` and the
    launch's ``cap_module``/``cap_source``."""
    rt = runtime.select(
        "pid", "tid", "ts", "name", "op_id", "module", "source", "kernel"
    ).sort("ts", maintain_order=True)
    begins = (
        rt.filter(pl.col("name").str.ends_with("StreamBeginCapture"))
        .select("pid", "tid", begin="ts")
        .with_row_index("graph")
        .with_columns(pl.col("graph").cast(I64))
    )
    ends = rt.filter(pl.col("name").str.ends_with("StreamEndCapture")).select("pid", "tid", end="ts")
    if begins.height == 0 or ends.height == 0:
        return _empty_nodes()
    windows = begins.sort("begin").join_asof(
        ends.sort("end"), left_on="begin", right_on="end", by=["pid", "tid"], strategy="forward",
        check_sortedness=False,
    ).filter(pl.col("end").is_not_null())
    calls = rt.filter(
        pl.col("kernel").is_not_null()
        | (pl.col("name").str.contains(_NODE_CALL) & ~pl.col("name").str.contains(_NOT_A_NODE))
    )
    inside = (
        calls.join_asof(
            windows.sort("begin"), left_on="ts", right_on="begin", by=["pid", "tid"], strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("graph").is_not_null() & (pl.col("ts") < pl.col("end")))
        .with_columns(name=pl.coalesce("kernel", _copy_kind(pl.col("name"), unnamed=pl.lit(_UNNAMED))))
    )
    return (
        inside.with_columns(node=pl.int_range(pl.len(), dtype=I64).over("graph"))
        .with_columns(occurrence=pl.int_range(pl.len(), dtype=I64).over("graph", "name"))
        .select("graph", "node", "name", "occurrence", cap_op_id="op_id", cap_module="module", cap_source="source")
    )


def _empty_nodes() -> pl.DataFrame:
    return pl.DataFrame(
        schema={"graph": I64, "node": I64, "name": pl.String, "occurrence": I64,
                "cap_op_id": I64, "cap_module": pl.String, "cap_source": pl.String}
    )


def _copy_kind(name: pl.Expr, *, unnamed: pl.Expr) -> pl.Expr:
    """A copy or set node's name on both sides (their names differ by API)."""
    low = name.str.to_lowercase()
    return pl.when(low.str.contains("memcpy")).then(pl.lit("<memcpy>")).when(
        low.str.contains("memset")
    ).then(pl.lit("<memset>")).otherwise(unnamed)


def _replayed_nodes(kernels: pl.DataFrame, *, named: bool) -> pl.DataFrame:
    """Kernels run by graph launches: ``kernel_id, launch_id, ts, position``,
    and ``name``/``occurrence`` as :func:`captured_nodes` spells them."""
    kernel_name = pl.col("name") if named else pl.lit(_UNNAMED)
    return (
        kernels.filter(pl.col("launch").str.contains(GRAPH_LAUNCH).fill_null(False))
        .select(
            "kernel_id", "launch_id", "ts",
            name=pl.when(pl.col("kind").cast(pl.String) == KERNEL).then(kernel_name)
            .otherwise(_copy_kind(pl.col("name"), unnamed=kernel_name)),
        )
        .sort("ts", "kernel_id")
        .with_columns(position=pl.int_range(pl.len(), dtype=I64).over("launch_id"))
        .with_columns(occurrence=pl.int_range(pl.len(), dtype=I64).over("launch_id", "name"))
    )


def _signatures(nodes: pl.DataFrame, by: str) -> pl.DataFrame:
    """One row per graph (or launch): ``sig``, the hash of its node names as a
    multiset, and ``first_ts`` (its first node's time, where known)."""
    order = pl.col("ts").min() if "ts" in nodes.columns else pl.col("node").min()
    return nodes.group_by(by).agg(
        sig=pl.col("name").sort().str.join("\n").hash(),
        first_ts=order.cast(I64),
    )


def _pair_launches(replays: pl.DataFrame, graphs: pl.DataFrame, replayed: pl.DataFrame,
                   captured: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``launch_id -> graph`` (with the replay's ``sig``), and the candidate
    graphs of each ``sig``: the k-th replay of a node set takes the
    (k mod n)-th of the n captured graphs holding it.

    A node set no captured graph holds exactly (a kernel the profiler
    dropped, a replay cut by the end of the trace) takes the captured graphs
    sharing the most nodes with it, when they share at least
    :data:`MIN_SHARED` of the larger of the two.
    """
    exact = replays.select("sig").unique().join(graphs.select("sig", "graph"), on="sig", how="inner")
    loose = replays.join(exact.select("sig").unique(), on="sig", how="anti")
    candidates = [exact]
    if loose.height:
        # One replay stands for each node set; scored against every graph.
        sample = loose.sort("first_ts", "launch_id").unique("sig", keep="first").select("sig", "launch_id")
        nodes = replayed.join(sample, on="launch_id", how="inner")
        shared = (
            nodes.join(captured.select("graph", "name", "occurrence"), on=["name", "occurrence"], how="inner")
            .group_by("sig", "graph")
            .agg(shared=pl.len())
        )
        sizes = nodes.group_by("sig").agg(n_replay=pl.len())
        graph_sizes = captured.group_by("graph").agg(n_graph=pl.len())
        scored = (
            shared.join(sizes, on="sig").join(graph_sizes, on="graph")
            .with_columns(score=pl.col("shared") / pl.max_horizontal("n_replay", "n_graph"))
            .filter(pl.col("score") >= MIN_SHARED)
            .filter(pl.col("score") == pl.col("score").max().over("sig"))
        )
        candidates.append(scored.select("sig", "graph"))
    cand = pl.concat(candidates).sort("sig", "graph").with_columns(
        slot=pl.int_range(pl.len(), dtype=I64).over("sig"), n=pl.len().over("sig").cast(I64)
    )
    counts = cand.select("sig", "n").unique("sig")
    replays = (
        replays.join(counts, on="sig", how="inner")
        .sort("first_ts", "launch_id")
        .with_columns(slot=pl.int_range(pl.len(), dtype=I64).over("sig") % pl.col("n"))
    )
    pairs = replays.join(cand.select("sig", "slot", "graph"), on=["sig", "slot"], how="inner").select(
        "launch_id", "graph", "sig"
    )
    return pairs, cand.select("sig", "graph")


def op_copies(
    used: pl.DataFrame, capture_ops: pl.DataFrame, *, first_id: int, skip: pl.DataFrame | None = None
) -> pl.DataFrame:
    """One row per replay and capture op it needs (the launching ops and their
    ancestors): ``launch_id, cap_op_id, op_id`` (the copy's new id).
    Ancestors in ``skip`` (``cap_op_id``) and above them are left out."""
    parents = capture_ops.select(cap_op_id="op_id", parent="parent_id")
    if skip is not None:
        parents = parents.join(skip.rename({"cap_op_id": "parent"}), on="parent", how="anti")
    need = used.select("launch_id", "cap_op_id").drop_nulls().unique()
    frontier = need
    while frontier.height:
        up = (
            frontier.join(parents, on="cap_op_id", how="inner")
            .select("launch_id", cap_op_id="parent")
            .drop_nulls()
            .unique()
        )
        frontier = up.join(need, on=["launch_id", "cap_op_id"], how="anti")
        need = pl.concat([need, frontier])
    return need.sort("launch_id", "cap_op_id").with_columns(
        op_id=pl.int_range(pl.len(), dtype=I64) + first_id
    )


def appended_ops(
    copies: pl.DataFrame, capture_ops: pl.DataFrame, ops: pl.DataFrame, flag: str = "from_capture",
    *, forward_links: bool = False,
) -> pl.DataFrame:
    """The copies as rows of ``ops``' schema, links renumbered into the copies,
    ``flag`` true on them (the column saying where they were copied from).
    ``forward_links``: keep ``fwd_op_id`` (renumbered; null where the forward
    op was not copied) instead of clearing it."""
    new_id = copies.select("launch_id", "cap_op_id", "op_id")
    rows = copies.join(capture_ops.drop("op_id").with_columns(cap_op_id=capture_ops["op_id"]),
                       on="cap_op_id", how="left", maintain_order="left")
    links = ("parent_id", "top_op_id", "fwd_op_id") if forward_links else ("parent_id", "top_op_id")
    for link in links:
        renum = new_id.rename({"cap_op_id": link, "op_id": f"new_{link}"})
        rows = rows.join(renum, on=["launch_id", link], how="left", maintain_order="left").with_columns(
            pl.col(f"new_{link}").alias(link)
        ).drop(f"new_{link}")
    # At replay these ops cost no CPU time: each copy is an instant at its
    # graph launch, in the launch's step (capture-time stamps would stretch
    # the trace back to the capture).
    rows = rows.with_columns(
        ts=pl.col("at"),
        dur=pl.lit(0, I64),
        end=pl.col("at"),
        fwd_op_id=pl.col("fwd_op_id") if forward_links else pl.lit(None, I64),  # a capture's are not copied
        step=pl.col("at_step"),
        **{flag: pl.lit(True)},
    )
    return rows.select(
        pl.col(c).cast(t) if c in rows.columns else pl.lit(None, t).alias(c) for c, t in ops.schema.items()
    )


def set_by_kernel(kernels: pl.DataFrame, values: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    """``kernels`` with ``cols`` replaced by ``values`` (keyed by kernel_id) where given."""
    joined = kernels.select("kernel_id").join(
        values.select("kernel_id", *(pl.col(c).alias(f"_{c}") for c in cols), _hit=pl.lit(True)),
        on="kernel_id", how="left", maintain_order="left",
    )
    hit = joined["_hit"].fill_null(False)
    out = []
    for c in cols:
        new = pl.select(pl.when(hit).then(joined[f"_{c}"].cast(kernels.schema[c])).otherwise(kernels[c])).to_series()
        out.append(new.alias(c))
    return kernels.with_columns(out)
