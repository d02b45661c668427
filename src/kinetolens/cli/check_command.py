"""``kinetolens check TRACE|RUNDIR``: whether every invariant holds on the trace's results.

One line per invariant: ``ok`` or ``violated`` with the result and the
values that break it (:mod:`kinetolens.analysis.invariants`).  Exit status
0 when all hold, 1 when any is violated, 2 on bad input.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import click

from kinetolens.cli.load_options import TraceLoading, trace_load_options

#: Exit status when an invariant is violated (2 is bad input).
EXIT_VIOLATED = 1


def _traces(target: str) -> list[Path]:
    from kinetolens.runs.summaries import rank_traces

    p = Path(target)
    if p.is_dir():
        return [t.path for t in rank_traces(p)]  # type: ignore[union-attr]
    return [p]


@click.command("check")
@click.argument("target", metavar="TRACE|RUNDIR")
@click.option("--json", "json_", is_flag=True, help="Print the violations per trace as JSON.")
@trace_load_options(ncu=True)
def check_command(target: str, json_: bool, loading: TraceLoading) -> None:
    """Check what must always hold of the analyses' results (durations >= 0,
    shares <= 100%, step parts add up, critical path within its span,
    savings >= 0, ...): one line per invariant; exit 1 if any is violated."""
    from kinetolens.analysis.invariants import INVARIANTS, Violation, check_trace
    from kinetolens.cli.render import emit_json, terminal_width

    found: dict[str, list[Violation]] = {}
    paths = _traces(target)
    if loading.ncu is not None and len(paths) != 1:
        raise click.BadParameter(f"pairs with one trace, and {target} holds {len(paths)}", param_hint="--ncu")
    for path in paths:
        found[str(path)] = check_trace(loading.load(str(path)))
    if json_:
        emit_json({t: [{"invariant": v.invariant, "result": v.result, "values": v.values} for v in vs] for t, vs in found.items()})
    else:
        for trace, violations in found.items():
            click.echo(trace)
            by_name: dict[str, list[Violation]] = {}
            for v in violations:
                by_name.setdefault(v.invariant, []).append(v)
            names = max(len(n) for n in INVARIANTS)
            width = terminal_width()
            for name, inv in INVARIANTS.items():
                bad = by_name.get(name)
                if not bad:
                    click.echo(_line("ok", name, inv.why, names, width))
                    continue
                for v in bad:
                    values = ", ".join(f"{k}={_shown(x)}" for k, x in v.values.items())
                    click.echo(_line("violated", name, f"{v.result}: {values}", names, width))
    if any(found.values()):
        sys.exit(EXIT_VIOLATED)


#: Where the text beside an invariant's name would be narrower than this, it goes under the name.
MIN_TEXT = 30


def _line(status: str, name: str, text: str, names: int, width: int | None) -> str:
    """One invariant's line, its text wrapped to ``width`` (None: one line)."""
    head = f"  {status:<8}  {name:<{names}}  "
    if width is None or len(head) + len(text) <= width:
        return head + text
    if width - len(head) >= MIN_TEXT:
        return _fill(text, width, head, " " * len(head))
    return head.rstrip() + "\n" + _fill(text, width, " " * 12, " " * 12)


def _fill(text: str, width: int, first: str, rest: str) -> str:
    """Wrapped at spaces only: a hyphenated word or a value stays whole."""
    return textwrap.fill(text, width=width, initial_indent=first, subsequent_indent=rest,
                         break_on_hyphens=False, break_long_words=False)  # fmt: skip


def _shown(value: object) -> str:
    return f"{value:,.3f}" if isinstance(value, float) else str(value)
