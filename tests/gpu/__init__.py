"""The GPU suite: run by bench/gpu_check.sh on a CUDA machine, skipped elsewhere."""
