"""``kinetolens hang DIR``: which rank a hung job waits for, from its flight recorder dumps."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from kinetolens.analysis.ranks.hang import Call, HangReport, Mismatch, Stuck
    from kinetolens.analysis.ranks.hang_p2p import StuckTransfer, TransferMismatch


def _ranks(ranks: tuple[int, ...] | list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _call(call: Call | None, labels: dict[str, str]) -> str:
    if call is None:
        return "-"
    from kinetolens.analysis.ranks.hang import shapes

    return f"{labels.get(call.group, 'group ' + call.group)} #{call.seq_id} {call.op} {shapes(call.input_sizes)}"


def _stuck_lines(s: Stuck) -> list[str]:
    from kinetolens.analysis.ranks.hang import shapes

    lines = [f"STUCK  {s.group_label} #{s.seq_id} {s.op} {shapes(s.input_sizes)}"]
    lines.append(f"  entered it, waiting: {_ranks(s.waiting)}")
    if s.missing:
        last = "; ".join(f"rank {r} last entered #{seq}" for r, seq in s.missing_last)
        lines.append(f"  never joined:        {_ranks(s.missing)}  ({last})")
    else:
        lines.append("  every member entered it; none of the waiting ranks saw it complete")
    if s.no_dump:
        lines.append(f"  no dump (unknown):   {_ranks(s.no_dump)}")
    return lines


def _transfer_lines(t: StuckTransfer) -> list[str]:
    from kinetolens.analysis.ranks.hang import shapes

    lines = [f"STUCK  {t.group_label} send/recv {t.src} -> {t.dst}, transfer #{t.index} {shapes(t.sizes)}"]
    lines.append(f"  entered it, waiting: {_ranks(t.waiting)}")
    if t.missing is None:
        lines.append("  both sides entered it; neither saw it complete")
    elif t.no_dump:
        lines.append(f"  no dump (unknown):   rank {t.missing} (its {t.missing_side})")
    else:
        lines.append(f"  never entered:       rank {t.missing} (its {t.missing_side})")
    return lines


def _transfer_mismatch_lines(m: TransferMismatch) -> list[str]:
    from kinetolens.analysis.ranks.hang import shapes

    return [
        f"MISMATCH  {m.group_label} send/recv {m.src} -> {m.dst}, transfer #{m.index}: different shapes",
        f"  rank {m.src} sends {shapes(m.send_sizes)}; rank {m.dst} receives {shapes(m.recv_sizes)}",
    ]


def _mismatch_lines(m: Mismatch) -> list[str]:
    what = "different collectives" if m.kind == "op" else "different shapes"
    lines = [f"MISMATCH  {m.group_label} #{m.seq_id}: {what}"]
    lines += [f"  {_ranks(ranks)}: {call}" for ranks, call in m.calls]
    return lines


def render(report: HangReport, directory: str) -> str:
    """The report as one screen of text."""
    labels = {s.group: s.group_label for s in report.stuck} | {m.group: m.group_label for m in report.mismatches}
    from kinetolens.analysis.ranks.hang import DEFAULT_GROUP

    labels.setdefault("0", DEFAULT_GROUP)
    backend = ", ".join(report.backends) or "no calls"
    lines = [
        f"{directory}: flight recorder dumps of {len(report.ranks)} ranks ({backend}; recorder {', '.join(report.versions)})",
        "",
    ]
    cells = [(str(r.rank), _call(r.last_entered, labels), _call(r.last_completed, labels)) for r in report.ranks]
    heads = ("rank", "last entered", "last completed")
    widths = [max(len(row[i]) for row in (heads, *cells)) for i in range(3)]
    for row in (heads, *cells):
        lines.append(f"{row[0]:>{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}".rstrip())
    lines.append("")
    for s in report.stuck:
        lines += _stuck_lines(s)
    if not report.stuck:
        lines.append("No stuck collective: every member of every group finished every collective it entered.")
    for t in report.stuck_transfers:
        lines += _transfer_lines(t)
    for m in report.mismatches:
        lines += _mismatch_lines(m)
    for tm in report.transfer_mismatches:
        lines += _transfer_mismatch_lines(tm)
    if report.mismatch_count > len(report.mismatches):
        lines.append(
            f"... and {report.mismatch_count - len(report.mismatches)} more mismatches (--json lists the first)"
        )
    elif not report.mismatches:
        lines.append(
            "No mismatch: every group's ranks called the same collectives with the same shapes at each sequence id."
        )
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


@click.command(name="hang")
@click.argument("directory", metavar="DIR", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "json_", is_flag=True, help="Print the report as one JSON object.")
def hang_command(directory: str, json_: bool) -> None:
    """Read the flight recorder dumps in DIR (one file per rank, as torch
    writes them with TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE and
    TORCH_NCCL_DEBUG_INFO_TEMP_FILE; pickle or JSON) and say which collective
    each rank last entered and completed, which ranks never joined the stuck
    one, and where ranks called different collectives or shapes at one
    sequence id."""
    from kinetolens.analysis.ranks.hang import hang_report
    from kinetolens.ingest.flight_recorder import read_dumps

    report = hang_report(read_dumps(directory))
    if json_:
        from kinetolens.cli.render import emit_json

        emit_json(report.to_json())
    else:
        click.echo(render(report, directory))
