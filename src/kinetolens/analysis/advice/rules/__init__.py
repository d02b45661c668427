"""The recommendation rules, one per module, registered when imported.

Each module holds one rule (a function decorated with
:func:`~kinetolens.analysis.advice.rule_registry.rule`) and its thresholds.
Adding a rule is adding a module, its import here and its place in
:data:`ORDER`.
"""

from kinetolens.analysis.advice.rule_registry import REGISTRY, Rule, RuleError
from kinetolens.analysis.advice.rules import (  # noqa: F401 - imported to register their rules
    allocator_off,
    below_roofline,
    data_parallel,
    dataloader,
    excess_dram,
    exposed_communication,
    fp32_tensor_cores,
    host_bound,
    host_transfers,
    launch_overhead,
    memory_capacity,
    misaligned_shapes,
    synchronizations,
)

#: The order findings with equal savings are listed in (imports are sorted by name, so it is said here).
ORDER = (
    "allocator_off",
    "dataloader_bound",
    "host_bound",
    "host_transfers",
    "launch_overhead",
    "synchronizations",
    "fp32_tensor_cores",
    "misaligned_shapes",
    "below_roofline",
    "memory_capacity",
    "exposed_communication",
    "excess_dram_traffic",
    "data_parallel",
)


def ordered(registry: dict[str, Rule], order: tuple[str, ...]) -> tuple[Rule, ...]:
    """The rules of ``registry`` in ``order``, which must name each exactly once."""
    missing = [name for name in registry if name not in order]
    unknown = [name for name in order if name not in registry]
    if missing or unknown:
        raise RuleError(
            f"rule order out of date: not placed {missing}, not registered {unknown}"
        )
    return tuple(registry[name] for name in order)


#: The rules, in :data:`ORDER`.
RULES: tuple[Rule, ...] = ordered(REGISTRY, ORDER)
