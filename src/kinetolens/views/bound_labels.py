"""How each critical-path bound reads, the same words in the terminal, report and dashboard."""

from __future__ import annotations

BOUND_LABELS = {
    "cpu": "CPU ops",
    "data_loading": "data loading",
    "launch_overhead": "launch overhead",
    "kernel_gap": "kernel gaps",
    "gpu_compute": "GPU compute",
    "gpu_memory": "GPU memcpy/memset",
    "communication": "communication",
    "sync_wait": "sync wait",
}
