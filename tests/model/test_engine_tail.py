"""Ops the autograd engine runs after its last node of a pass are backward in every step, the last included.

PyTorch 1.x records the work the engine (and DDP's reducer) does between
two nodes as bare top-level ops on the autograd thread; they belong to the
node before them.  They were owned only once the next node arrived, so the
last step's (after which no node comes) stayed forward while every other
step's were backward, and a step read alone (:mod:`kinetolens.windowed`)
differed from the same step in the whole trace.
"""

from __future__ import annotations

import polars as pl

import kinetolens
from tests.conftest import trace_path


def test_ddp_bucket_copies_are_backward_in_every_step() -> None:
    trace = kinetolens.load(trace_path("hta/nccl_parser_config/nccl_data.json.gz"), cache=False)
    copies = trace.ops.filter(pl.col("name") == "torch.distributed.ddp.reducer::copy_bucket_to_grad")
    per_step = copies.group_by("step").agg(pl.col("direction").cast(pl.String).unique()).sort("step")
    assert per_step["step"].to_list() == [4, 5, 6]
    assert per_step["direction"].to_list() == [["bprop"]] * 3
    # The copies are top-level on the autograd thread: the rule above, not an enclosing node, made them backward.
    assert copies["parent_id"].null_count() == copies.height
