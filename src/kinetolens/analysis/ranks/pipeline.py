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

The multi-stage schedules (``ScheduleInterleaved1F1B``,
``ScheduleInterleavedZeroBubble``, ``ScheduleZBVZeroBubble``) record each
action of their plan instead, ``PP:<stage><action><microbatch>``: ``F``
forward, ``B`` full backward, ``I`` and ``W`` the backward's input and weight
halves (zero-bubble schedules split it to fill the bubble), besides the
transfers (``PP:2SEND_F0``) and FSDP actions.  A rank running several stages
is interleaved: its stages ``r, r + p`` (looped) or ``r, 2p - 1 - r`` (the
V of ZBV).  Interleaved 1F1B with ``v`` stages per rank has the ideal bubble
``(p - 1) / (v m + p - 1)``; the zero-bubble schedules' ideal depends on the
passes' relative cost, so none is given.
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
#: A multi-stage schedule's compute actions: stage, action, microbatch.
ACTION = r"^PP:(\d+)(F|B|I|W)(\d+)$"
#: Point-to-point transfer ops: a stage moving activations or gradients, not computing.
P2P = r"^(c10d::(send|recv_|recv|batch_isend_irecv)|gloo:(send|recv)|nccl:(send|recv))"

STEP_SCHEMA = {"step": pl.Int64, "order": pl.String, "microbatches": pl.Int64, "step_ns": pl.Int64, "compute_ns": pl.Int64,
               "stages": pl.String}  # fmt: skip

GPIPE = "GPipe (all forwards, then all backwards)"
ONE_F_ONE_B = "1F1B (backwards interleaved with forwards)"
#: Zero-bubble schedules split each backward into its input and weight passes.
ZERO_BUBBLE = "zero bubble 1F1B"
#: Several stages a rank (the table's ``stages`` column says which).
INTERLEAVED = "interleaved 1F1B"
INTERLEAVED_ZB = "interleaved zero bubble"
#: ZBV places a rank's two stages in a V (rank 0: the first and the last).
ZBV = "ZBV zero bubble"
#: Schedules that fill the bubble with weight passes: their ideal depends on the passes' cost.
ZERO_BUBBLE_SCHEDULES = (ZERO_BUBBLE, INTERLEAVED_ZB, ZBV)


def _marks(ops: pl.DataFrame) -> pl.DataFrame:
    """The step's microbatch passes: ``tag`` (``F0``, ``I2`` ...), ``micro``, ``stage``
    (None for a single-stage schedule's ``Forward i`` ranges)."""
    stepped = pl.col("step").is_not_null()
    actions = ops.filter(pl.col("name").str.contains(ACTION) & stepped)
    if actions.height:
        parts = pl.col("name").str.extract_groups(ACTION)
        return actions.with_columns(
            tag=parts.struct.field("2") + parts.struct.field("3"),
            micro=parts.struct.field("3").cast(pl.Int64),
            stage=parts.struct.field("1").cast(pl.Int64),
        )
    marks = ops.filter(pl.col("name").str.contains(MICROBATCH) & stepped)
    parts = pl.col("name").str.extract_groups(MICROBATCH)
    return marks.with_columns(
        tag=parts.struct.field("1").str.slice(0, 1) + parts.struct.field("2"),
        micro=parts.struct.field("2").cast(pl.Int64),
        stage=pl.lit(None, pl.Int64),
    )


def pipeline_steps(trace: Trace) -> pl.DataFrame:
    """Per whole step of a pipeline stage's trace: the order of its microbatch
    passes (``F0 F1 B0 ...``), the microbatches, the step's time, the time
    its compute ops ran (ns) and the stages the rank ran (``"0,2"``; empty
    where not recorded).  From the schedule's ranges where it records them,
    else from the stage's passes (:func:`_passes`); empty for a trace that is
    no pipeline stage."""
    ops, steps = trace.ops, trace.steps
    if steps.height == 0:
        return pl.DataFrame(schema=STEP_SCHEMA)
    marks = _marks(ops)
    if marks.height == 0:
        return _passes(trace)
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
        stages = sorted(set(mine["stage"].drop_nulls().to_list()))
        rows.append({
            "step": step["step"], "order": " ".join(mine["tag"].to_list()), "microbatches": mine["micro"].n_unique(),
            "step_ns": step["dur"], "compute_ns": covered_ns(union_intervals(busy)),
            "stages": ",".join(map(str, stages)),
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
            "step_ns": step["dur"], "compute_ns": covered_ns(union_intervals(busy)), "stages": "",
        })  # fmt: skip
    return pl.DataFrame(rows, schema=STEP_SCHEMA)


def stage_ids(stages: str) -> list[int]:
    """``"0,2"`` -> ``[0, 2]``."""
    return [int(x) for x in stages.split(",") if x]


def schedule_of(order: str, stages: str = "", ranks: int | None = None) -> str:
    """The schedule a stage's pass order shows (``F0 F1 B0 B1``: GPipe), with
    the stages it ran (``"0,3"``) and the pipeline's ranks for a multi-stage one."""
    tags = order.split()
    split = any(t[:1] in ("I", "W") for t in tags)
    ids = stage_ids(stages)
    if len(ids) > 1:
        v_shaped = len(ids) == 2 and ranks is not None and ids[0] + ids[1] == 2 * ranks - 1 and ids[1] - ids[0] != ranks
        if split and v_shaped:
            return ZBV
        return INTERLEAVED_ZB if split else INTERLEAVED
    if split:
        return ZERO_BUBBLE
    first_backward = next((i for i, t in enumerate(tags) if t.startswith("B")), len(tags))
    if all(t.startswith("B") for t in tags[first_backward:]):
        return GPIPE
    return ONE_F_ONE_B


def ideal_bubble(stages: int, microbatches: int, per_rank: int = 1) -> float:
    """The bubble share of GPipe and 1F1B, ``(p - 1) / (m + p - 1)``; of
    interleaved 1F1B with ``v`` stages per rank, ``(p - 1) / (v m + p - 1)``."""
    return (stages - 1) / (per_rank * microbatches + stages - 1) if microbatches > 0 and stages > 0 else 0.0


def _ideal(schedule: str, ranks: int, microbatches: int, per_rank: int) -> float | None:
    """The ideal bubble (share of the step) of ``schedule``; None for the zero-bubble ones."""
    if schedule in ZERO_BUBBLE_SCHEDULES:
        return None
    return ideal_bubble(ranks, microbatches, per_rank)


def pipeline_table(summaries: Sequence[RankSummary]) -> pl.DataFrame:
    """Per pipeline rank: its schedule, the stages it runs (where recorded), microbatches per step, mean step
    and compute time, the bubble (ms and % of the step) and the ideal bubble of
    its schedule for the stages present (%)."""
    schema = {"rank": pl.Int64, "schedule": pl.String, "stages": pl.String, "microbatches": pl.Int64, "steps": pl.Int64,
              "step_ms": pl.Float64, "compute_ms": pl.Float64, "bubble_ms": pl.Float64,
              "bubble_pct": pl.Float64, "ideal_bubble_pct": pl.Float64}  # fmt: skip
    stages = [s for s in summaries if s.pipeline.height]
    rows = []
    for s in stages:
        p = s.pipeline
        step, compute = float(p["step_ns"].mean()), float(p["compute_ns"].mean())  # type: ignore[arg-type]
        micro = int(p["microbatches"].max())  # type: ignore[arg-type]
        bubble = max(step - compute, 0.0)
        schedule = schedule_of(p["order"][0], p["stages"][0], len(stages))
        ideal = _ideal(schedule, len(stages), micro, max(len(stage_ids(p["stages"][0])), 1))
        rows.append({
            "rank": s.rank, "schedule": schedule, "stages": ", ".join(map(str, stage_ids(p["stages"][0]))) or None,
            "microbatches": micro, "steps": p.height,
            "step_ms": step / 1e6, "compute_ms": compute / 1e6, "bubble_ms": bubble / 1e6,
            "bubble_pct": 100.0 * bubble / step if step else None,
            "ideal_bubble_pct": 100.0 * ideal if ideal is not None else None,
        })  # fmt: skip
    return pl.DataFrame(rows, schema=schema)
