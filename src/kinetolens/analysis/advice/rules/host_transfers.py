"""The step waits on copies between host and GPU: time in which only memory
copies run (the step breakdown's ``memcpy``: no kernel beside them)."""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.advice.rule_context import NS_PER_MS, RuleContext
from kinetolens.analysis.advice.rule_registry import rule
from kinetolens.analysis.finding import Finding

#: Share of the step in which only copies run above which they are worth moving.
COPY_SHARE = 0.2
#: Share of the copied bytes from pageable memory above which pinning it is advised.
PAGEABLE_SHARE = 0.1
#: Copies between host and device, by the name the profilers give them.
HOST_COPY = r"HtoD|DtoH"


@rule(requires=("gpu",))
def host_transfers(ctx: RuleContext) -> list[Finding]:
    avg = ctx.average_ns
    total, copying = avg.get("total", 0.0), avg.get("memcpy", 0.0)
    if not total or copying / total < COPY_SHARE:
        return []
    copies = ctx.trace.kernels.filter((pl.col("kind") == "memcpy") & pl.col("name").str.contains(HOST_COPY))
    if copies.height == 0:
        return []  # device-to-device copies: the work itself, not a transfer to move
    per_step = copies.height / ctx.steps
    moved = float(copies["bytes"].fill_null(0).sum()) / ctx.steps
    busy = float(copies["dur"].sum())
    rate = f" at {moved * ctx.steps / busy:,.1f} GB/s" if busy and moved else ""  # bytes per ns = GB/s
    pageable = copies.filter(pl.col("name").str.contains("Pageable"))
    gpus = copies["device"].n_unique()
    where_to = f" to and from {gpus} GPUs" if gpus > 1 else ""
    top = copies.group_by(pl.col("op").fill_null(pl.col("launch")).fill_null("(no op)")).agg(pl.col("dur").sum())
    op = str(top.sort("dur", descending=True)["op"][0])
    pageable_bytes = float(pageable["bytes"].fill_null(0).sum()) / ctx.steps
    pin = (
        f"; {pageable_bytes / moved:.0%} of the bytes from pageable memory: pin it (pin_memory=True) first"
        if moved and pageable_bytes / moved >= PAGEABLE_SHARE
        else ""
    )
    return [
        Finding(
            rule="host_transfers",
            title="The step waits on copies between host and GPU",
            evidence=(
                f"{copying / total:.1%} of the step ({copying / NS_PER_MS:,.2f} of {total / NS_PER_MS:,.2f} ms) "
                f"only memory copies run; {per_step:,.0f} host-device copies per step move "
                f"{moved / 1e9:,.2f} GB{where_to}{rate}, most of it from {op}{pin}"
            ),
            change=(
                "Keep what is copied on the GPU between steps (model weights: no CPU offload or reloading each "
                "step), or overlap the copies with compute: copy the next batch from pinned memory with "
                "non_blocking=True on a side stream while this step runs"
            ),
            saving_ms=min(copying, total) / NS_PER_MS,
            estimate="time per step in which only copies ran (the step breakdown's memcpy); at most that is hidden",
            where={"op": op},
        )
    ]
