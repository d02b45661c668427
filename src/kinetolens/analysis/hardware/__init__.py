"""How well the work used the hardware: GPU specs, Tensor Cores, counters, roofline, and the kernel and module tables built on them."""
