"""Names kinetolens writes into traces and run directories.

Capture writes them and the readers look for them, so each is defined once
here, in a module that imports nothing (the analyzer must not import the
capture package, which needs torch).
"""

from __future__ import annotations

#: A trace file of a run, as torch-tb-profiler names them.
TRACE_SUFFIX = ".pt.trace.json.gz"
#: kinetolens' run metadata beside a trace (a name tb-profiler's pattern skips).
METADATA_SUFFIX = ".kinetolens.json"
#: The link ``kinetolens run`` keeps to a run name's newest run folder:
#: ``LOGDIR/NAME/latest -> <start time>``.
LATEST_RUN = "latest"
#: Key of ``Trace.metadata`` under which the loader puts that file's contents.
RUN_METADATA_KEY = "kinetolens_run"

#: Counter events of ``profile(sample_rate=N)``.
MEMORY_SAMPLE_EVENT = "kinetolens memory sample"
#: NVTX range of one op under ``kinetolens.nvtx()``: this prefix, then JSON.
NVTX_OP_PREFIX = "kinetolens "
#: NVTX range around a module's forward: this prefix, then the module path.
NVTX_MODULE_PREFIX = "kinetolens.module "
#: Kineto's category of launch arrows (runtime call -> kernel), which the
#: Perfetto export writes too.
LAUNCH_FLOW_CAT = "ac2g"
#: The record_function range torch (and ``with_modules`` captures) put around a module's forward.
MODULE_RANGE_PREFIX = "nn.Module: "


def trace_stem(trace_name: str) -> str:
    """``trace_name`` without its trace suffix: what the files beside it are named after."""
    return trace_name[: -len(TRACE_SUFFIX)] if trace_name.endswith(TRACE_SUFFIX) else trace_name.rsplit(".", 1)[0]


def metadata_name(trace_name: str) -> str:
    """The name of the run metadata file beside the trace file ``trace_name``."""
    return trace_stem(trace_name) + METADATA_SUFFIX


#: A CUDA allocator snapshot written beside a trace (``kinetolens.profile(memory_snapshot=True)``).
SNAPSHOT_SUFFIX = ".memory_snapshot.pickle"


def snapshot_name(trace_name: str) -> str:
    """The name of the memory snapshot beside the trace file ``trace_name``."""
    return trace_stem(trace_name) + SNAPSHOT_SUFFIX

#: The folder beside a graph replay trace that holds its capture trace; it
#: belongs to that replay's run, never a run of its own.
CAPTURE_DIR = "capture_traces"
#: The file in that folder naming the capture trace (vLLM, sglang, xDiT): metadata, not a trace.
CAPTURE_DETAILS = "execution_details.json"
