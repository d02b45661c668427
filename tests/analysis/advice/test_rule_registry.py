"""Recommendation rules are registered with their requirements, trace kinds and what-if changes.

What the advice machinery knows of a rule lives on its registration, so a
renamed rule keeps its requirements; a mistake in a registration is an
error when the rule's module is imported, not a rule that quietly runs
everywhere (or never).
"""

from __future__ import annotations

import pytest

from kinetolens.analysis.advice.recommendations import RULES
from kinetolens.analysis.advice.rule_registry import REGISTRY, Rule, RuleError, rule
from kinetolens.analysis.advice.rules import ORDER, ordered
from kinetolens.analysis.finding import Finding
from kinetolens.analysis.trace_kind_type import TraceKind


def _no_findings(ctx: object) -> list[Finding]:
    return []


def test_registering_a_rule_name_twice_is_an_error() -> None:
    table: dict[str, Rule] = {}
    rule(requires=("gpu",), registry=table)(_no_findings)
    with pytest.raises(RuleError, match="registered twice"):
        rule(registry=table)(_no_findings)
    # A real rule's name, in the real registry: refused, and the registered rule kept.
    host_bound = REGISTRY["host_bound"]

    def host_bound_again(ctx: object) -> list[Finding]:
        return []

    host_bound_again.__name__ = "host_bound"
    with pytest.raises(RuleError, match="host_bound"):
        rule()(host_bound_again)
    assert REGISTRY["host_bound"] is host_bound


def test_a_rule_requiring_an_unknown_trace_kind_is_an_error() -> None:
    table: dict[str, Rule] = {}
    with pytest.raises(RuleError, match="'cuda'"):
        rule(requires=("gpu", "cuda"), registry=table)(_no_findings)
    assert table == {}


def test_a_rule_simulating_a_change_the_simulator_cannot_parse_is_an_error() -> None:
    with pytest.raises(RuleError, match="launch:fast"):
        rule(simulated=("launch:fast",), registry={})(_no_findings)
    with pytest.raises(RuleError, match="simulates none"):
        rule(simulated_from=("launch:0",), registry={})(_no_findings)


def test_the_rule_order_must_place_every_registered_rule() -> None:
    with pytest.raises(RuleError, match="not placed"):
        ordered(REGISTRY, ORDER[:-1])
    with pytest.raises(RuleError, match="not registered"):
        ordered(REGISTRY, (*ORDER, "no_such_rule"))


def test_each_rule_carries_its_requirements_kinds_and_changes() -> None:
    table = {
        r.name: (r.finding, r.requires, r.training_only, r.simulated, r.simulated_from) for r in RULES
    }
    assert table == {
        "allocator_off": ("allocator_off", ("gpu", "pytorch"), False, (), ()),
        "dataloader_bound": ("dataloader_bound", ("pytorch",), True, ("category:data_loading=0",), ()),
        "host_bound": ("host_bound", ("gpu", "aligned_clocks"), False, ("category:data_loading=0", "category:cpu=0"),
                       ("category:data_loading=0",)),
        "host_transfers": ("host_transfers", ("gpu",), False, (), ()),
        "launch_overhead": ("launch_overhead", ("gpu", "aligned_clocks"), False, ("launch:0",), ()),
        "synchronizations": ("synchronization", ("gpu", "aligned_clocks"), False, (), ()),
        "fp32_tensor_cores": ("fp32_tensor_cores", ("gpu", "pytorch"), False, (), ()),
        "misaligned_shapes": ("misaligned_shapes", ("gpu", "pytorch"), False, (), ()),
        "below_roofline": ("below_roofline", ("gpu",), False, (), ()),
        "memory_capacity": ("memory_near_capacity", ("gpu",), True, (), ()),
        "exposed_communication": ("exposed_communication", ("gpu",), False, ("overlap:communication",), ()),
        "excess_dram_traffic": ("excess_dram_traffic", ("gpu",), False, (), ()),
        "data_parallel": ("data_parallel", ("pytorch",), True, (), ()),
    }  # fmt: skip
    assert [r.name for r in RULES] == list(ORDER)


def test_a_rule_applies_by_its_registration() -> None:
    gpu_training = TraceKind(gpu=True, pytorch=True, modules=True)
    serving = TraceKind(gpu=True, pytorch=True, modules=True, inference=True)
    cpu_only = TraceKind(gpu=False, pytorch=True, modules=True)
    applies = {r.name: (r.applies(gpu_training), r.applies(serving), r.applies(cpu_only)) for r in RULES}
    assert applies["dataloader_bound"] == (True, False, True)
    assert applies["host_bound"] == (True, True, False)
    assert applies["memory_capacity"] == (True, False, False)
