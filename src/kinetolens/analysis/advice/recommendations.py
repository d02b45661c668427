"""What to change first: rules that turn the analyses into ranked advice.

Each rule is one small function ``(RuleContext) -> list[Finding]`` in its own
module under :mod:`kinetolens.analysis.advice.rules`, registered with what it
needs, the programs it applies to and its what-if change
(:mod:`.rule_registry`); :data:`RULES` lists them.  A finding
carries the numbers that triggered it, where they come from (op, module,
source line, step), what to change, and an estimated saving per step in
milliseconds with a sentence saying how it was estimated.

Where a rule's advice maps to a what-if change (its registered
``simulated`` change: no DataLoader stall, no launch overhead, communication
overlapped; and the Tensor Core rules' kernels made faster, put in
``RuleContext.changes``), its saving is simulated: every step's dependency graph is re-timed with that change
(:mod:`kinetolens.analysis.paths.whatif`) and the finding carries the predicted
step time.  The other rules estimate with a formula, deliberately
conservative, because advice ranked by inflated savings sends people after
the wrong thing:

* a saving is never more than the wall time the rule can point at in the
  trace (exclusive DataLoader time, GPU idle gaps, exposed communication);
* rules that overlap (a DataLoader stall also shows up as a host-wait GPU
  gap) do not count the same time twice: the host-bound rule subtracts
  what the DataLoader and synchronization rules already claimed;
* a rule whose benefit is not time (memory near capacity) reports 0 ms and
  sorts last.

Per-step figures divide by the number of profiled steps (one window for a
trace without ``ProfilerStep`` ranges); on an inference trace they are per
engine iteration, worded so, without training advice (:mod:`.inference`).

The findings of a trace are computed once, in its analysis session
(:mod:`kinetolens.analysis.session`): the summary, report and dashboard share them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import polars as pl

from kinetolens.analysis.advice.inference import served
from kinetolens.analysis.advice.rule_context import (
    NS_PER_MS,
    SCALAR_READ_OPS,
    RuleContext,
)
from kinetolens.analysis.advice.rule_registry import Rule
from kinetolens.analysis.advice.rules import RULES
from kinetolens.analysis.finding import Finding
from kinetolens.analysis.session import per_trace, whole_steps
from kinetolens.analysis.trace_kind_type import TraceKind
from kinetolens.model.trace import Trace

__all__ = [
    "NS_PER_MS", "RULES", "SCALAR_READ_OPS", "RuleContext", "applies", "damaged_inputs", "findings", "left_out",
    "recommendations", "recommendations_frame", "simulated",
]  # fmt: skip


def applies(rule: Rule, kind: TraceKind) -> bool:
    """Whether ``rule`` is meant for a program of this kind (its requirements; no training advice to a server)."""
    return rule.applies(kind)


def recommendations(trace: Trace) -> list[Finding]:
    """Every rule's findings over the steps that ran whole, the largest
    estimated saving per step first (computed once per trace)."""
    return list(_recommendations(trace))


@per_trace
def _recommendations(trace: Trace) -> tuple[Finding, ...]:
    return tuple(findings(RuleContext(whole_steps(trace))))


#: Malformed events skipped, as a share of all events, above which no advice is given.
SKIPPED_EVENTS_SHARE = 0.001


def damaged_inputs(trace: Trace) -> str | None:
    """Why the trace's numbers cannot be trusted for advice, or None.

    A file cut short loses every event written after the cut; Kineto writes
    host ops before runtime calls, kernels and memory events, so a cut can
    take all GPU work while the host ops still look whole.  Events skipped
    as malformed may be any of them (half the kernels of a trace, say).
    Every rule reads the step breakdown or the kernels, so none is run on
    such a trace.
    """
    cut = [w for w in trace.warnings if w.kind == "truncated JSON" or "ends early" in w.detail]
    if cut:
        lost = []
        if trace.devices and trace.kernels.height == 0:
            lost.append(f"every GPU kernel (the file lists {len(trace.devices)} GPUs)")
        if trace.runtime.height == 0 and trace.devices:
            lost.append("every runtime call")
        what = f", including {' and '.join(lost)}" if lost else ""
        return f"the file is truncated ({cut[0].detail}): events written after the cut are missing{what}"
    skipped = sum(w.count for w in trace.warnings if w.kind == "malformed events skipped")
    if skipped:
        kept = sum(t.height for t in (trace.ops, trace.runtime, trace.kernels, trace.python, trace.memory))
        share = skipped / (skipped + kept)
        if share >= SKIPPED_EVENTS_SHARE:
            return f"{skipped:,} events ({share:.1%}) were malformed and skipped; which kernels or ops they were is unknown"
    return None


def left_out(trace: Trace) -> str | None:
    """Why rules meant for this program were not run, once for the summary, or None.

    The rules that measure host-GPU gaps require aligned clocks
    (:attr:`TraceKind.aligned_clocks`): on a GPU clock offset from the host's
    their idle and launch delay would be the offset itself."""
    from kinetolens.analysis.trace_kind import clock_offset

    steps = whole_steps(trace)
    kind = RuleContext(steps).kind
    if kind.aligned_clocks:
        return None
    skipped = [r.finding for r in RULES if "aligned_clocks" in r.requires and r.applies(replace(kind, aligned_clocks=True))]
    offset = clock_offset(steps)
    if not skipped or offset is None:
        return None
    return f"{', '.join(skipped)} left out: {offset.sentence()}"


def findings(ctx: RuleContext) -> list[Finding]:
    """:func:`recommendations` over a context a caller already holds.
    None on a trace whose inputs are damaged (:func:`damaged_inputs`)."""
    if damaged_inputs(ctx.trace) is not None:
        return []
    found = [f for rule in RULES if rule.applies(ctx.kind) for f in rule(ctx)]
    if ctx.iterations is None:  # the simulator re-times steps, not an engine's iterations
        found = simulated(found, ctx.trace, ctx.changes, step_ms=ctx.step_ms)
    if ctx.kind.inference:
        found = served(found, per_iteration=ctx.iterations is not None)
    return sorted(found, key=lambda f: -f.saving_ms)  # stable: ties keep RULES order


#: The registered rules by the ``rule`` their findings carry.
_BY_FINDING: dict[str, Rule] = {r.finding: r for r in RULES}


def simulated(
    found: list[Finding], trace: Trace, made: dict[str, list[Any]] | None = None, step_ms: float | None = None
) -> list[Finding]:
    """``found`` with the savings of rules registered with a ``simulated``
    change (and of rules that put their change in ``made``) taken from the what-if simulator, each
    step's graph built once for all of them.  A trace the simulator cannot
    re-time keeps the formula estimates.

    The predicted step is today's step as every view shows it (``step_ms``,
    the step breakdown's mean) less the saving, not the simulator's own
    re-timing of the measured graph: a path shorter or longer than the step
    would otherwise predict a step longer than today's for a saving >= 0."""

    from kinetolens.analysis.paths.whatif import parse_change, whatif_many
    from kinetolens.errors import TraceError

    made = made or {}
    rules = {r: _BY_FINDING[r] for r in {f.rule for f in found} if r in _BY_FINDING}
    plan = {r: rule.simulated for r, rule in rules.items() if rule.simulated}
    start = {r: rule.simulated_from for r, rule in rules.items() if rule.simulated_from}
    plan.update({r: tuple(c.spec for c in made[r]) for r in {f.rule for f in found} if r in made})
    if not plan:
        return found
    changes = {c.spec: c for cs in made.values() for c in cs}
    sets = list(dict.fromkeys([*plan.values(), *(start[r] for r in plan if r in start), ()]))
    try:
        results = dict(zip(sets, whatif_many(trace, [[changes.get(s) or parse_change(s) for s in specs] for specs in sets], paths=False), strict=True))
    except TraceError:
        return found
    measured = results[()].measured_us
    if not results[()].steps or not measured:
        return found
    out = []
    for f in found:
        if f.rule not in plan:
            out.append(f)
            continue
        after = results[plan[f.rule]].predicted_us
        before = results[start.get(f.rule, ())].predicted_us
        today = step_ms or measured / 1000
        saving = min(max(before - after, 0.0) / 1000, today)
        predicted = today - saving
        spec = " ".join(c for c in plan[f.rule] if c not in start.get(f.rule, ()))
        basis = f" after {' '.join(start[f.rule])}" if f.rule in start else ""
        how = (
            f"{', '.join(c.target or c.spec for c in made[f.rule])} {1 / (made[f.rule][0].factor or 1):g}x faster"
            if f.rule in made
            else f"{spec}{basis} (kinetolens whatif)"
        )
        estimate = (
            f"simulated: {results[()].re_timed} re-timed with {how}; "
            f"predicted step time after the change: {predicted:,.3g} ms, {-saving / today:+.0%}"
        )
        out.append(replace(f, saving_ms=saving, estimate=estimate, predicted_step_ms=predicted,
                           whatif=None if f.rule in made else spec, simulated_on=results[()].sampled))  # fmt: skip
    return out


def recommendations_frame(trace: Trace) -> pl.DataFrame:
    """:func:`recommendations` as a table (``where`` as JSON text)."""
    import json

    rows = [{**f.to_dict(), "where": json.dumps(f.where, default=str)} for f in recommendations(trace)]
    schema = {k: pl.String for k in ("rule", "title", "evidence", "change", "estimate", "where", "whatif", "per")}
    return pl.DataFrame(rows, schema={**schema, "saving_ms": pl.Float64, "predicted_step_ms": pl.Float64}).select(
        "rule", "title", "saving_ms", "per", "predicted_step_ms", "evidence", "change", "estimate", "whatif", "where"
    )
