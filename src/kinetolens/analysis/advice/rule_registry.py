"""The recommendation rules, each registered with what it needs, where it
applies and the what-if change its advice amounts to.

A rule is a function ``(RuleContext) -> list[Finding]`` decorated with
:func:`rule`, one per module under :mod:`kinetolens.analysis.advice.rules`.
Everything the advice machinery knows about a rule is on its :class:`Rule`,
so renaming the function cannot silently drop its requirements (as side
tables keyed by function name could).  Registration checks what it can: a
second rule of the same name, a requirement that is not a
:class:`~kinetolens.analysis.trace_kind.TraceKind` flag, or a what-if change
the simulator cannot parse is an error when the module is imported.

Rules are listed in the order they were registered (the import order in
:mod:`kinetolens.analysis.advice.rules`): findings with equal savings keep it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kinetolens.analysis.finding import Finding
from kinetolens.analysis.trace_kind_type import TraceKind

if TYPE_CHECKING:
    from kinetolens.analysis.advice.rule_context import RuleContext

Check = Callable[["RuleContext"], list[Finding]]

#: What a rule may require of the program: the flags of :class:`TraceKind`.
KIND_FLAGS = tuple(
    f.name for f in dataclasses.fields(TraceKind) if f.type in (bool, "bool")
)


class RuleError(ValueError):
    """A rule registered twice, or with a requirement or change that does not exist."""


@dataclass(frozen=True)
class Rule:
    """One recommendation rule and what the advice machinery needs to know of it."""

    #: The rule's name (its function's).
    name: str
    check: Check
    #: The ``rule`` its findings carry (the name unless it says otherwise).
    finding: str
    #: :class:`TraceKind` flags the trace must have for the rule to run
    #: (rules about GPU time need a GPU; rules reading PyTorch's ops need PyTorch).
    requires: tuple[str, ...] = ()
    #: Advice about training only: not given on an inference trace.
    training_only: bool = False
    #: The what-if changes (:func:`~kinetolens.analysis.paths.whatif.parse_change`
    #: specs) the advice amounts to: its saving is simulated with them.
    simulated: tuple[str, ...] = ()
    #: The changes its saving is counted from (default: the trace as measured).
    simulated_from: tuple[str, ...] = ()

    def __call__(self, ctx: RuleContext) -> list[Finding]:
        return self.check(ctx)

    def applies(self, kind: TraceKind) -> bool:
        """Whether the rule is meant for a program of this kind."""
        if kind.inference and self.training_only:
            return False
        return all(getattr(kind, need) for need in self.requires)


#: Every registered rule by name, in registration order.
REGISTRY: dict[str, Rule] = {}


def rule(
    *,
    requires: tuple[str, ...] = (),
    training_only: bool = False,
    simulated: tuple[str, ...] = (),
    simulated_from: tuple[str, ...] = (),
    finding: str | None = None,
    registry: dict[str, Rule] | None = None,
) -> Callable[[Check], Rule]:
    """Register the decorated function as a rule (see :class:`Rule` for the fields);
    ``registry`` is :data:`REGISTRY` unless given."""
    table = REGISTRY if registry is None else registry

    def register(check: Check) -> Rule:
        name = check.__name__
        if name in table:
            raise RuleError(
                f"rule {name!r} is registered twice ({table[name].check.__module__} and {check.__module__})"
            )
        unknown = [need for need in requires if need not in KIND_FLAGS]
        if unknown:
            raise RuleError(
                f"rule {name!r} requires {', '.join(map(repr, unknown))}: not one of {', '.join(KIND_FLAGS)}"
            )
        if simulated_from and not simulated:
            raise RuleError(
                f"rule {name!r} counts its saving from a change but simulates none"
            )
        _check_changes(name, (*simulated, *simulated_from))
        made = table[name] = Rule(
            name,
            check,
            finding or name,
            tuple(requires),
            training_only,
            tuple(simulated),
            tuple(simulated_from),
        )
        return made

    return register


def _check_changes(name: str, specs: tuple[str, ...]) -> None:
    from kinetolens.analysis.paths.whatif_changes import BadChange, parse_change

    for spec in specs:
        try:
            parse_change(spec)
        except BadChange as exc:
            raise RuleError(f"rule {name!r} simulates {spec!r}: {exc}") from None
