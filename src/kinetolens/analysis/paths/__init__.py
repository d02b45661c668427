"""Dependencies between a step's work: the critical path (one rank and across ranks) and what-if simulation."""
