"""Names the profiler itself writes into a trace, needed from the readers up.

Pure data: the readers (``ingest``) and the model both read these, so they
live below both.
"""

from __future__ import annotations

#: Kineto's profiler-step annotation names (``ProfilerStep#3``); Nsight
#: exports of ``emit_nvtx`` runs carry the same ranges as NVTX markers.
STEP_PREFIX = "ProfilerStep#"
