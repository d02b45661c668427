"""Which op an allocator event happened in: the innermost op on its thread
whose half-open range holds it, checked against a search of every op on
randomly nested ranges over several threads."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kinetolens.analysis.memory.usage import enclosing_ops


def _nested(rng: np.random.Generator, pid: int, tid: int, lo: int, hi: int, depth: int, parent: int | None, rows: list[dict]) -> None:
    """Ranges inside [lo, hi), each with children inside it."""
    t = lo
    while True:
        start = t + int(rng.integers(0, 6))
        if start >= hi:
            return
        end = min(hi, start + int(rng.integers(0, (hi - lo) // 2 + 2)))  # some take no time
        op_id = len(rows)
        rows.append({"op_id": op_id, "pid": pid, "tid": tid, "ts": start, "end": end, "depth": depth, "parent_id": parent})
        if depth < 4 and end - start > 2:
            _nested(rng, pid, tid, start, end, depth + 1, op_id, rows)
        t = max(end, start + 1)


def _innermost(ops: list[dict], pid: int | None, tid: int | None, ts: int) -> int | None:
    inside = [o for o in ops if (o["pid"], o["tid"]) == (pid, tid) and o["ts"] <= ts < o["end"]]
    return max(inside, key=lambda o: (o["depth"], o["ts"], o["op_id"]))["op_id"] if inside else None


@pytest.mark.parametrize("events_per_trace", [200, 2])
@pytest.mark.parametrize("seed", range(25))
def test_each_event_gets_the_innermost_op_holding_it(seed: int, events_per_trace: int) -> None:
    # 2 events (a memory peak's): only the ops of their threads up to the last one are searched
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    for pid, tid in [(1, 10), (1, 11), (2, 10)]:
        _nested(rng, pid, tid, 0, 300, 0, None, rows)
    rows.sort(key=lambda o: (o["ts"], -(o["end"] - o["ts"]), o["depth"]))  # the model's order: by start, outer first
    old_to_new = {o["op_id"]: i for i, o in enumerate(rows)}
    ops = [{**o, "op_id": i, "parent_id": old_to_new.get(o["parent_id"])} for i, o in enumerate(rows)]
    events = [
        {"pid": int(rng.choice([1, 2])), "tid": int(rng.choice([10, 11, 12])), "ts": int(rng.integers(0, 310))}
        for _ in range(events_per_trace)
    ] + [{"pid": None, "tid": 10, "ts": 5}]
    schema = {"op_id": pl.Int64, "pid": pl.Int64, "tid": pl.Int64, "ts": pl.Int64, "end": pl.Int64, "depth": pl.Int64, "parent_id": pl.Int64}
    got = enclosing_ops(pl.DataFrame(events, schema={"pid": pl.Int64, "tid": pl.Int64, "ts": pl.Int64}), pl.DataFrame(ops, schema=schema))
    want = [_innermost(ops, e["pid"], e["tid"], e["ts"]) for e in events]
    assert sum(w is not None for w in want) > (40 if events_per_trace > 2 else -1)
    assert got.to_list() == want
