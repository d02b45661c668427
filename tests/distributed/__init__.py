"""Real multi-process gloo DDP runs profiled by kinetolens, shared by tests.

See :mod:`tests.distributed.runs` for the fixtures and :mod:`.ddp_job` for
the job itself.
"""
