"""Where a step's time goes and how busy the GPU is: the step breakdown, idle time, streams, launches."""
