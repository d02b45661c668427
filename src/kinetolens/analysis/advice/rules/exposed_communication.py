"""Communication not overlapped with compute."""

from __future__ import annotations

from kinetolens.analysis.advice.rule_context import (
    NS_PER_MS,
    RuleContext,
)
from kinetolens.analysis.advice.rule_registry import rule
from kinetolens.analysis.finding import Finding
from kinetolens.analysis.gputime.idle import comm_comp_overlap

#: Exposed (non-overlapped) communication as a share of step time to report.
EXPOSED_COMM_SHARE = 0.05


@rule(requires=("gpu",), simulated=("overlap:communication",))
def exposed_communication(ctx: RuleContext) -> list[Finding]:
    overlap = comm_comp_overlap(ctx.trace)
    if overlap.height == 0 or not ctx.step_ms:
        return []
    row = overlap.row(0, named=True)
    comm_ms = (row["comm_us"] or 0.0) / 1000.0 / ctx.steps
    exposed = comm_ms - (row["overlap_us"] or 0.0) / 1000.0 / ctx.steps
    if exposed / ctx.step_ms < EXPOSED_COMM_SHARE:
        return []
    compute_ms = ctx.average_ns.get("kernel", 0.0) / NS_PER_MS
    saving = min(exposed, compute_ms)
    return [
        Finding(
            rule="exposed_communication",
            title="Communication not overlapped with compute",
            evidence=(
                f"{comm_ms:.2f} ms of collectives per step, {exposed:.2f} ms of it with no compute kernel running "
                f"({exposed / ctx.step_ms:.1%} of the {ctx.step_ms:.2f} ms step)"
            ),
            change=(
                "Overlap collectives with compute: DDP gradient bucketing (bucket_cap_mb, no "
                "find_unused_parameters), FSDP prefetch (backward_prefetch, forward_prefetch), async ops "
                "(async_op=True) waited on as late as possible"
                if ctx.kind.pytorch
                else "Overlap communication with compute: non-blocking calls (MPI_Isend/MPI_Irecv, "
                "MPI_Iallreduce, or NCCL on its own stream) started as soon as the data is ready and waited "
                "on as late as possible"
            ),
            saving_ms=saving,
            estimate="exposed communication per step, capped by the compute time there is to hide it behind",
        )
    ]
