"""The GPU suite (issue 21): run by bench/gpu_check.sh on a CUDA machine, skipped elsewhere."""
