"""The columns of the per-kernel table (:mod:`kinetolens.analysis.hardware.kernels`)
and what each means.  Plain constants (no polars): ``kinetolens kernels -h``
lists them without loading a trace."""

from __future__ import annotations

#: Column name -> meaning, in default display order (``kinetolens kernels -h``).
KERNEL_COLUMNS: dict[str, str] = {
    "idx": "kernel index in start order",
    "step": "profiler step (ProfilerStep#N) that launched it",
    "dir": "fprop / bprop / optimizer / other",
    "module": "nn.Module path (backward kernels: the forward op's module)",
    "op": "innermost PyTorch op that launched it",
    "top_op": "outermost PyTorch op on the launching thread",
    "fwd_op": "for backward kernels, the forward op they differentiate",
    "sub": "index of this kernel among its op call's kernels (dgrad=0, wgrad=1 ...)",
    "kernel": "kernel name as recorded, the whole C++ signature (memcpy/memset included)",
    "short_name": "readable kernel name: no argument list, namespaces or template plumbing",
    "fused_ops": "torch.compile kernels: the source ops fused into it (see kinetolens compiled)",
    "kind": "kernel / memcpy / memset",
    "params": "input shapes and dtypes (backward: the forward op's)",
    "dur_us": "silicon time in microseconds",
    "tc": "Tensor Cores used: yes / no / unknown",
    "flops": "FLOPs of the op's work this kernel did (shared by duration when the op ran several)",
    "bytes": "minimum bytes moved (inputs read once, outputs written once), shared likewise",
    "tflops_s": "achieved TFLOP/s: flops / dur",
    "gbps": "achieved GB/s: bytes / dur",
    "device": "GPU index",
    "stream": "CUDA stream",
    "grid": "grid dimensions",
    "block": "block dimensions",
    "regs": "registers per thread",
    "smem": "shared memory per block (bytes)",
    "occupancy": "estimated achieved occupancy (%)",
    "blocks_per_sm": "blocks per SM",
    "source": "user code that launched it: file:line of the call, or in func (file:line) where only the enclosing function is known (the line it was entered at)",
    "launch": "the runtime/driver call that launched it",
    "graph": "CUDA/HIP graph it was replayed from and its node there (graph:node); empty for eager kernels",
    "start_us": "start time, microseconds from the first kernel",
}

DEFAULT_COLUMNS = [
    "idx", "step", "dir", "module", "op", "fwd_op", "sub", "kernel", "short_name", "params", "dur_us", "tc", "device",
    "stream", "grid", "block", "source",
]  # fmt: skip
