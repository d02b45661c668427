"""Each op's totals are its own figure plus those of every op under it.

:func:`op_instances` sums them up the op tree a level at a time; here the
same sums are taken the plain way, one op at a time from the last op to the
first (children have larger op ids than their parents), and must agree
exactly: device time to the nanosecond, FLOPs and bytes bit for bit (the
additions happen in the same order), and a total the op and every op under
it leave unknown stays unknown (null), never 0.
"""

from __future__ import annotations

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.workload.op_times import op_instances
from tests.conftest import trace_path

TRACES = [
    "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",  # work known on many ops
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",  # deep module nesting, flash attention
    "hta/df_index_resolver/df_index_resolver.json.gz",  # a backward thread, no work known
]


def _reference_totals(inst: pl.DataFrame) -> dict[str, list[float | int | None]]:
    parents = inst["parent_id"].to_list()
    row = {op: i for i, op in enumerate(inst["op_id"].to_list())}
    totals: dict[str, list[float | int | None]] = {
        "device_total": inst["device_self"].to_list(),
        "flops_total": inst["flops_self"].to_list(),
        "bytes_total": inst["bytes_self"].to_list(),
    }
    for i in range(inst.height - 1, -1, -1):
        p = row.get(parents[i]) if parents[i] is not None else None
        if p is None:
            continue
        for name, values in totals.items():
            if values[i] is not None:
                values[p] = values[i] + (values[p] or 0)
    return totals


@pytest.mark.parametrize("rel", TRACES)
def test_totals_are_the_subtree_sums(rel: str) -> None:
    inst = op_instances(kinetolens.load(trace_path(rel)))
    assert inst["op_id"].is_sorted()
    expected = _reference_totals(inst)
    for name, values in expected.items():
        assert inst[name].to_list() == values, name
    # the sums reach up: some op holds more device time than it launched itself
    assert (inst["device_total"] > inst["device_self"]).any()


def test_unknown_work_stays_unknown_up_the_tree() -> None:
    inst = op_instances(kinetolens.load(trace_path(TRACES[0])))
    unknown = inst.filter(pl.col("flops_self").is_null() & pl.col("flops_total").is_null())
    assert unknown.height > 0  # ops with no known work under them read unknown ...
    known_below = inst.filter(pl.col("flops_self").is_null() & pl.col("flops_total").is_not_null())
    assert known_below.height > 0  # ... and ops whose only known work is below them take it
