"""Inference: engine iterations and their prefill/decode phases."""
