"""Input loading stalls the step: the DataLoader's exclusive time, hidden by worker processes."""

from __future__ import annotations

from kinetolens.analysis.advice.rule_context import (
    NS_PER_MS,
    RuleContext,
)
from kinetolens.analysis.advice.rule_registry import rule
from kinetolens.analysis.finding import Finding

#: Share of step time in the DataLoader above which loading is worth fixing
#: (torch-tb-profiler's threshold is 5%).
DATALOADER_SHARE = 0.05


@rule(requires=("pytorch",), training_only=True, simulated=("category:data_loading=0",))
def dataloader_bound(ctx: RuleContext) -> list[Finding]:
    avg = ctx.average_ns
    total, loading = avg.get("total", 0.0), avg.get("dataloader", 0.0)
    if not total or loading / total < DATALOADER_SHARE:
        return []
    share = loading / total
    gpu = ctx.kind.gpu
    return [
        Finding(
            rule="dataloader_bound",
            title="Input loading stalls the step",
            evidence=(
                f"{share:.1%} of the step ({loading / NS_PER_MS:.2f} of {total / NS_PER_MS:.2f} ms) is spent in "
                f"DataLoader __next__{' with no GPU work running' if gpu else ''}, averaged over {ctx.steps} steps"
            ),
            change=(
                "Load batches in worker processes: DataLoader(num_workers>0, pin_memory=True, "
                "persistent_workers=True), and move heavy preprocessing out of __getitem__ or onto the GPU"
                if gpu
                else "Load batches in worker processes: DataLoader(num_workers>0, persistent_workers=True), "
                "and move heavy preprocessing out of __getitem__ (precompute it once, or cache decoded samples)"
            ),
            saving_ms=loading / NS_PER_MS,
            estimate=(
                "the DataLoader's exclusive time per step ("
                + (
                    "time no kernel, copy or runtime call ran"
                    if gpu
                    else "time no other op ran"
                )
                + "); worker processes can hide at most that"
            ),
            where={"op": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"},
        )
    ]
