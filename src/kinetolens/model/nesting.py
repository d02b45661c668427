"""Interval nesting on one thread: who encloses whom.

Kineto ranges on a thread form a forest (an op contains the ops it calls).
Real traces also contain ranges that overlap without nesting (async
annotations, clock jitter of a few ns); those are kept, attached to the range
they start in, and counted, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass
class Nesting:
    """For every input row: its innermost enclosing container (or -1).

    Series rather than lists: a Python int per row is ~36 bytes, and on a
    multi-GB trace these two columns would otherwise be the load's peak.
    """

    parent: pl.Series
    depth: pl.Series
    overlaps: int


def enclosing(frame: pl.DataFrame, *, is_container: str | None = None) -> Nesting:
    """Innermost enclosing container of every row of ``frame``.

    ``frame`` needs columns ``row`` (the caller's index), ``group`` (a thread
    key), ``ts`` and ``end``.  When ``is_container`` names a boolean column,
    only those rows can enclose others (queries such as runtime calls are
    looked up but never become parents).  Returned lists are indexed by
    ``row``.  A row encloses another when it starts at or before it and the
    other starts before it ends; ties in start put the longer range outside.

    Threads whose ranges nest properly (nearly all) are solved with joins in
    polars; a thread with a range that overlaps its parent without nesting
    is replayed with the stack walk that defines the rule.
    """
    n = frame.height
    if n == 0:
        return Nesting(pl.Series("parent", [], pl.Int64), pl.Series("depth", [], pl.Int64), 0)
    ordered = (
        frame.select(
            "row",
            "group",
            "ts",
            "end",
            (pl.col(is_container) if is_container else pl.lit(True)).cast(pl.Boolean).alias("container"),
        )
        .sort(["group", "ts", "end"], descending=[False, False, True], maintain_order=True)
        .with_row_index("k")
        .with_columns(pl.col("k").cast(pl.Int64))
    )
    solved = _nested_parents(ordered)
    parent = solved["parent_row"].fill_null(-1)
    depth = solved["depth"]
    overlaps = 0
    tangled = solved.filter(pl.col("tangled"))["group"].unique()
    if tangled.len():
        replay = ordered.filter(pl.col("group").is_in(tangled.implode()))
        walked = _stack_walk(replay)
        overlaps = walked.overlaps
        fix = pl.DataFrame({"k": replay["k"], "p": walked.parent, "d": walked.depth})
        both = solved.select("k").join(fix, on="k", how="left")
        parent = both["p"].fill_null(parent)
        depth = both["d"].fill_null(depth)
    by_row = pl.DataFrame({"row": ordered["row"], "parent": parent, "depth": depth}).sort("row")
    return Nesting(by_row["parent"].cast(pl.Int64), by_row["depth"].cast(pl.Int64), overlaps)


def _nested_parents(ordered: pl.DataFrame) -> pl.DataFrame:
    """Parent row and depth of every row, assuming proper nesting per group.

    With ranges in (ts, longest first) order ``k``, the open containers at a
    row are the earlier containers that end after it starts; their count is
    its depth, and its parent is the last earlier container one level up.
    ``tangled`` marks containers that end after their parent does, where
    that assumption breaks.  Each join carries only the columns it needs:
    on big traces these frames are the peak of the whole load.
    """
    n = ordered.height
    width = n + 1
    # Dense ranks of all times, so (time, k) pairs pack into one sortable int.
    ranks = pl.concat([ordered["ts"], ordered["end"]]).rank("dense").cast(pl.Int64)
    is_container = ordered["container"]
    # Containers closed before a row starts: end before its ts, or end equal
    # to its ts and earlier in order (the stack pops a range whose end <= ts).
    closes = (
        pl.DataFrame({"group": ordered["group"], "key": ranks[n:] * width + ordered["k"]})
        .filter(is_container)
        .sort("group", "key")
        .with_columns(closed=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("group"))
    )
    queries = pl.DataFrame({"group": ordered["group"], "key": ranks[:n] * width + ordered["k"] - 1, "k": ordered["k"]})
    del ranks
    closed = (
        queries.sort("group", "key")
        .join_asof(closes, on="key", by="group", strategy="backward", check_sortedness=False)
        .sort("k")["closed"]
        .fill_null(0)
    )
    del closes, queries
    opened = ordered.select(
        (pl.col("container").cast(pl.Int64).cum_sum() - pl.col("container").cast(pl.Int64)).over("group")
    ).to_series()
    levels = ordered.select("k", "group", "row", "end", "container").with_columns(depth=opened - closed)
    del opened, closed
    parents = levels.filter(pl.col("container")).select(
        "group", "depth", parent_k="k", parent_row="row", parent_end="end"
    )
    found = levels.with_columns(up=pl.col("depth") - 1).join_asof(
        parents,
        left_on="k",
        right_on="parent_k",
        by_left=["group", "up"],
        by_right=["group", "depth"],
        strategy="backward",
        allow_exact_matches=False,
        check_sortedness=False,
    )
    return found.select(
        "k",
        "group",
        "depth",
        "parent_row",
        tangled=pl.col("container") & (pl.col("end") > pl.col("parent_end")).fill_null(False),
    )


def _stack_walk(ordered: pl.DataFrame) -> Nesting:
    """The defining rule, one row at a time, in ``ordered``'s order.

    Returns parents (caller rows) and depths aligned with ``ordered``.
    """
    n = ordered.height
    parent = [-1] * n
    depth = [0] * n
    rows = ordered["row"].to_list()
    groups = ordered["group"].to_list()
    starts = ordered["ts"].to_list()
    ends = ordered["end"].to_list()
    container = ordered["container"].to_list()
    overlaps = 0
    stack_rows: list[int] = []
    stack_ends: list[int] = []
    current = object()
    for i in range(n):
        g = groups[i]
        if g != current:
            stack_rows.clear()
            stack_ends.clear()
            current = g
        ts = starts[i]
        while stack_ends and stack_ends[-1] <= ts:
            stack_ends.pop()
            stack_rows.pop()
        if stack_rows:
            parent[i] = stack_rows[-1]
            depth[i] = len(stack_rows)
            if container[i] and ends[i] > stack_ends[-1]:
                overlaps += 1
        if container[i]:
            stack_rows.append(rows[i])
            stack_ends.append(ends[i])
    return Nesting(parent, depth, overlaps)


def outermost_marked(parent: pl.Series, marked: pl.Series) -> pl.Series:
    """Row of each row's outermost marked ancestor-or-self (null where none is marked).

    ``parent`` holds each row's parent row (null at the roots).  Pointer
    jumping: every row keeps the outermost marked row seen between itself
    and ``jump`` (an ancestor), then takes over that ancestor's answer and
    jump, doubling the span covered each round; any forest takes about
    log2(depth) vectorized rounds instead of a Python pass per row.
    """
    return _marked_ancestor(parent, marked, nearest=False).alias("outermost")


def nearest_marked(parent: pl.Series, marked: pl.Series) -> pl.Series:
    """Row of each row's nearest marked ancestor-or-self (null where none is marked).

    The same pointer jumping as :func:`outermost_marked`, keeping the first
    marked row found instead of the last.
    """
    return _marked_ancestor(parent, marked, nearest=True).alias("nearest")


def _marked_ancestor(parent: pl.Series, marked: pl.Series, *, nearest: bool) -> pl.Series:
    best = pl.DataFrame({"m": marked}).select(pl.when(pl.col("m")).then(pl.int_range(pl.len(), dtype=pl.Int64))).to_series()
    jump = parent.cast(pl.Int64)
    while jump.null_count() < jump.len() and not (nearest and best.null_count() == 0):
        # Nearest: a row's own find wins; outermost: the ancestor's find wins.
        best = best.fill_null(best.gather(jump)) if nearest else best.gather(jump).fill_null(best)
        jump = jump.gather(jump)
    return best
