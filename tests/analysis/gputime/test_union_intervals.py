"""``union_intervals`` against a plain sweep: every busy time, overlap and
idle figure is a length of merged intervals (GPU busy per device, compute
and communication overlap, a rank's collectives)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kinetolens.analysis.gputime.gpu_streams import covered_ns, union_intervals


def _sweep(rows: list[tuple[tuple, int, int]]) -> list[tuple]:
    """Merged (key..., ts, end) by a loop over the intervals sorted by key then start."""
    out: list[list] = []
    for key, ts, end in sorted(rows, key=lambda r: ((tuple((k is not None, k) for k in r[0])), r[1])):
        if out and tuple(out[-1][:-2]) == key and ts <= out[-1][-1]:
            out[-1][-1] = max(out[-1][-1], end)
        else:
            out.append([*key, ts, end])
    return [tuple(r) for r in out]


@pytest.mark.parametrize("by", [[], ["device"], ["name"], ["device", "name"]])
@pytest.mark.parametrize("scale", [1, 10**15, 2**56], ids=["small", "epoch-ns", "far-apart"])
def test_merged_intervals_are_a_sweeps(by: list[str], scale: int) -> None:
    # far-apart: starts up to 99 * 2**56 ns apart, too far for one running maximum over the groups' offsets.
    rng = np.random.default_rng(len(by) * 7 + scale % 97)
    for _ in range(40):
        n = int(rng.integers(0, 50))
        ts = rng.integers(0, 100, n) * (scale if scale > 2**40 else 1) + (scale if scale <= 2**40 else 0)
        end = ts + rng.integers(0, 30, n)
        names = [None if x == "-" else x for x in rng.choice(["a", "b", "-"], n).tolist()]
        frame = pl.DataFrame({"ts": ts, "end": end, "device": rng.integers(0, 3, n), "name": names},
                             schema={"ts": pl.Int64, "end": pl.Int64, "device": pl.Int64, "name": pl.String})  # fmt: skip
        merged = union_intervals(frame, by)
        rows = [(tuple(r[c] for c in by), r["ts"], r["end"]) for r in frame.iter_rows(named=True)]
        assert merged.rows() == _sweep(rows)
        assert merged.columns == [*by, "ts", "end"]
        if not by:  # disjoint: covered time is their lengths' sum, never more than the span
            assert covered_ns(merged) <= (int(end.max()) - int(ts.min()) if n else 0)
