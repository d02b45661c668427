"""Pipeline parallelism: each stage's schedule and bubble.

``torch.distributed.pipelining`` records one range per microbatch and
direction on each stage's rank, ``Forward 3`` and ``Backward 3``.  Their
order in a step is the schedule the stage ran: every forward before every
backward is GPipe (fill and drain); backwards taken up while forwards remain
is 1F1B.  A stage computes only inside those ranges, and not all of that
time either: a ``Backward`` range opens with the receive of its gradient and
waits there for the next stage.  So a stage's *bubble* is the part of its
step in which none of its compute ops runs (ops under a microbatch range,
less the point-to-point sends and receives), and the ideal bubble of both
schedules with ``p`` stages and ``m`` microbatches is ``(p - 1) / (m + p - 1)``
of the step.  The difference is what the pipeline loses beyond its schedule
(communication, stages of unequal cost).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import polars as pl

from kinetolens.analysis.gputime.gpu_streams import covered_ns, union_intervals
from kinetolens.model.trace import Trace

if TYPE_CHECKING:
    from kinetolens.analysis.ranks.distributed import RankSummary

#: The ranges torch.distributed.pipelining records around one microbatch's pass.
MICROBATCH = r"^(Forward|Backward) (\d+)$"
#: Point-to-point transfer ops: a stage moving activations or gradients, not computing.
P2P = r"^(c10d::(send|recv_|recv|batch_isend_irecv)|gloo:(send|recv)|nccl:(send|recv))"

STEP_SCHEMA = {"step": pl.Int64, "order": pl.String, "microbatches": pl.Int64, "step_ns": pl.Int64, "compute_ns": pl.Int64}

GPIPE = "GPipe (all forwards, then all backwards)"
ONE_F_ONE_B = "1F1B (backwards interleaved with forwards)"


def pipeline_steps(trace: Trace) -> pl.DataFrame:
    """Per whole step of a pipeline stage's trace: the order of its microbatch
    passes (``F0 F1 B0 ...``), the microbatches, the step's time and the time
    its compute ops ran (ns).  From the microbatch ranges where the schedule
    records them, else from the stage's passes (:func:`_passes`); empty for a
    trace that is no pipeline stage."""
    ops, steps = trace.ops, trace.steps
    marks = ops.filter(pl.col("name").str.contains(MICROBATCH) & pl.col("step").is_not_null())
    if steps.height == 0:
        return pl.DataFrame(schema=STEP_SCHEMA)
    if marks.height == 0:
        return _passes(trace)
    parts = pl.col("name").str.extract_groups(MICROBATCH)
    marks = marks.with_columns(
        tag=parts.struct.field("1").str.slice(0, 1) + parts.struct.field("2"),
        micro=parts.struct.field("2").cast(pl.Int64),
    )
    work = ops.filter(
        (pl.col("kind") == "op") & pl.col("parent_id").is_in(marks["op_id"].implode()) & ~pl.col("name").str.contains(P2P)
    )
    rows = []
    for step in steps.filter(pl.col("complete")).iter_rows(named=True):
        mine = marks.filter(pl.col("step") == step["step"]).sort("ts")
        if mine.height == 0:
            continue
        busy = work.filter(pl.col("step") == step["step"]).select(
            ts=pl.col("ts").clip(step["start"], step["end"]), end=pl.col("end").clip(step["start"], step["end"])
        ).filter(pl.col("end") > pl.col("ts"))
        rows.append({
            "step": step["step"], "order": " ".join(mine["tag"].to_list()), "microbatches": mine["micro"].n_unique(),
            "step_ns": step["dur"], "compute_ns": covered_ns(union_intervals(busy)),
        })  # fmt: skip
    return pl.DataFrame(rows, schema=STEP_SCHEMA)


_TRANSFER = re.compile(P2P)
#: A run of ops shorter than this share of the stage's median backward pass is no
#: microbatch pass (the input split before the first forward, detaches after the last).
MIN_PASS = 0.05


def _passes(trace: Trace) -> pl.DataFrame:
    """:func:`pipeline_steps` for a schedule that records no microbatch ranges
    (``Schedule1F1B`` in torch 2.13): a stage that sends or receives between
    its forward and backward ops.  A pass is a run of the step's top-level
    ops of one direction between two transfers; each backward pass is one
    microbatch's."""
    ops = trace.ops.filter((pl.col("kind") == "op") & pl.col("step").is_not_null())
    p2p = pl.col("name").str.contains(P2P)
    if not ops.filter(p2p).height or not ops.filter(pl.col("direction") == "bprop").height:
        return pl.DataFrame(schema=STEP_SCHEMA)
    top = ops.filter(pl.col("depth") == pl.col("depth").min().over("step")).sort("ts")
    rows = []
    for step in trace.steps.filter(pl.col("complete")).iter_rows(named=True):
        mine = top.filter(pl.col("step") == step["step"])
        runs: list[list] = []  # [direction, ns]
        for name, direction, dur in mine.select("name", pl.col("direction").cast(pl.String), "dur").iter_rows():
            if name is not None and _TRANSFER.search(name):
                runs.append(["", 0])  # a transfer ends the pass
            elif direction in ("fprop", "bprop"):
                if not runs or runs[-1][0] != direction:
                    runs.append([direction, 0])
                runs[-1][1] += dur
        backward = sorted(ns for d, ns in runs if d == "bprop")
        if not backward:
            continue
        floor = MIN_PASS * backward[len(backward) // 2]
        tags, count = [], {"fprop": 0, "bprop": 0}
        for direction, ns in runs:
            if direction and ns >= floor:
                tags.append(f"{direction[0].upper()}{count[direction]}")
                count[direction] += 1
        busy = mine.filter(~p2p & pl.col("direction").cast(pl.String).is_in(["fprop", "bprop"])).select(
            ts=pl.col("ts").clip(step["start"], step["end"]), end=pl.col("end").clip(step["start"], step["end"])
        ).filter(pl.col("end") > pl.col("ts"))
        rows.append({
            "step": step["step"], "order": " ".join(tags), "microbatches": count["bprop"],
            "step_ns": step["dur"], "compute_ns": covered_ns(union_intervals(busy)),
        })  # fmt: skip
    return pl.DataFrame(rows, schema=STEP_SCHEMA)


def schedule_of(order: str) -> str:
    """The schedule a stage's pass order shows (``F0 F1 B0 B1``: GPipe)."""
    tags = order.split()
    first_backward = next((i for i, t in enumerate(tags) if t.startswith("B")), len(tags))
    if all(t.startswith("B") for t in tags[first_backward:]):
        return GPIPE
    return ONE_F_ONE_B


def ideal_bubble(stages: int, microbatches: int) -> float:
    """The bubble share of GPipe and 1F1B: ``(p - 1) / (m + p - 1)``."""
    return (stages - 1) / (microbatches + stages - 1) if microbatches > 0 and stages > 0 else 0.0


def pipeline_table(summaries: Sequence[RankSummary]) -> pl.DataFrame:
    """Per pipeline stage (rank): its schedule, microbatches per step, mean step
    and compute time, the bubble (ms and % of the step) and the ideal bubble of
    its schedule for the stages present (%)."""
    schema = {"rank": pl.Int64, "schedule": pl.String, "microbatches": pl.Int64, "steps": pl.Int64,
              "step_ms": pl.Float64, "compute_ms": pl.Float64, "bubble_ms": pl.Float64,
              "bubble_pct": pl.Float64, "ideal_bubble_pct": pl.Float64}  # fmt: skip
    stages = [s for s in summaries if s.pipeline.height]
    rows = []
    for s in stages:
        p = s.pipeline
        step, compute = float(p["step_ns"].mean()), float(p["compute_ns"].mean())  # type: ignore[arg-type]
        micro = int(p["microbatches"].max())  # type: ignore[arg-type]
        bubble = max(step - compute, 0.0)
        rows.append({
            "rank": s.rank, "schedule": schedule_of(p["order"][0]), "microbatches": micro, "steps": p.height,
            "step_ms": step / 1e6, "compute_ms": compute / 1e6, "bubble_ms": bubble / 1e6,
            "bubble_pct": 100.0 * bubble / step if step else None,
            "ideal_bubble_pct": 100.0 * ideal_bubble(len(stages), micro),
        })  # fmt: skip
    return pl.DataFrame(rows, schema=schema)
