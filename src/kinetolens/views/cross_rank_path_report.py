"""The report's "Critical path across ranks", inside its Across ranks section, in HTML and markdown.

Both render :class:`~kinetolens.views.cross_rank_path_section.CrossRankSection`
(computed once by :func:`kinetolens.views.report_data.collect`): a verdict
per step, what bounds each step's path and which ranks hold it (two charts
in HTML), each step's length and the rank gating it, the split of the whole
path, path time per rank (the top ranks and the others), the collectives on
the path with the rank each waited for, and the largest work on it.
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from kinetolens.views.chart_output import chart_html
from kinetolens.views.cross_rank_path_section import TABLES, TITLE, CrossRankSection, figures
from kinetolens.views.report_frames import frame_html, frame_md

#: The subsection's anchor in the HTML report.
ANCHOR = "cross-rank-path"
#: The per step table shows this many steps (the charts show them all).
STEP_ROWS = 30


def _section(data: Any) -> CrossRankSection | str | None:
    cross = getattr(data, "cross_rank", None)
    return getattr(cross, "path", None)


def cross_rank_path_html(data: Any) -> Markup:
    """The subsection as HTML (empty where the report has no cross-rank path)."""
    section = _section(data)
    if section is None:
        return Markup("")
    if isinstance(section, str):
        return Markup('<p class="kl-left-out" id="{}">{}</p>').format(ANCHOR, section)
    parts = [Markup('<h3 id="{}">{}</h3>').format(ANCHOR, TITLE), Markup("<p>{}.</p>").format(section.headline)]
    parts += [Markup('<p class="kl-verdict"><b>{}</b></p>').format(v) for v in section.verdicts]
    if section.more_verdicts:
        parts.append(Markup('<p class="kl-muted">{}</p>').format(section.more_verdicts))
    parts += [Markup('<p class="kl-muted">{}</p>').format(n) for n in section.notes]
    charts = [chart_html(fig, f"kl-chart-cross-rank-{name}") for name, fig in figures(section).items()]
    parts.append(Markup('<div class="kl-grid">{}</div>').format(Markup("\n").join(Markup(c) for c in charts)))
    for attr in TABLES:
        frame = getattr(section, attr)
        title = section.title(attr)
        if frame.height:
            parts.append(Markup("<h4>{}</h4>").format(title) + frame_html(frame, rows=STEP_ROWS if attr == "steps" else None))
        elif attr == "gates":
            parts.append(Markup('<p class="kl-left-out">{}</p>').format(section.gates_empty))
    return Markup("\n").join(parts)


def cross_rank_path_md(data: Any) -> list[str]:
    """The subsection as markdown parts (none where the report has no cross-rank path)."""
    section = _section(data)
    if section is None:
        return []
    if isinstance(section, str):
        return [f"\n_{section}_\n"]
    out = [f"\n### {TITLE}\n", f"{section.headline}.\n"]
    out.append("\n".join(f"- **{v}**" for v in section.verdicts) + "\n")
    if section.more_verdicts:
        out.append(f"\n_{section.more_verdicts}_\n")
    out += [f"\n_{n}_\n" for n in section.notes]
    for attr in TABLES:
        frame = getattr(section, attr)
        title = section.title(attr)
        if frame.height:
            out += [f"\n#### {title}\n", frame_md(frame, rows=STEP_ROWS if attr == "steps" else None)]
        elif attr == "gates":
            out.append(f"\n_{section.gates_empty}_\n")
    return out
