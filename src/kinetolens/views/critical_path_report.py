"""The report's "Critical path" section, in HTML and in markdown.

Both render :class:`~kinetolens.views.critical_path_section.CriticalPathSection`
(computed once by :func:`kinetolens.views.report_data.collect`): the verdict,
the notes, each step's length and what bounds it (a stacked bar in HTML),
the split of the whole path, and the ops, kernels, modules and source lines
on it. A table without rows is one line saying why; a trace without a path
is one line for the whole section.
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from kinetolens.views.chart_output import chart_html
from kinetolens.views.critical_path_section import TOPS, CriticalPathSection, split_figure
from kinetolens.views.report_frames import frame_html, frame_md

#: The section's anchor in the HTML report.
ANCHOR = "critical-path"
TITLE = "Critical path"
#: The per-step table shows this many steps (the chart shows them all).
STEP_ROWS = 30


def _section(data: Any) -> CriticalPathSection | str | None:
    return getattr(data, "critical_path", None)


def critical_path_html(data: Any) -> Markup:
    """The section as HTML (empty where the report was made without it)."""
    section = _section(data)
    if section is None:
        return Markup("")
    if isinstance(section, str):
        return Markup('<p class="kl-left-out" id="{}">{}</p>').format(ANCHOR, section)
    parts = [Markup('<h2 id="{}">{}</h2>').format(ANCHOR, TITLE), Markup('<p class="kl-verdict"><b>{}</b></p>').format(section.verdict)]
    parts += [Markup('<p class="kl-muted">{}</p>').format(n) for n in section.notes]
    parts.append(Markup(chart_html(split_figure(section), "kl-chart-critical-path")))
    parts.append(Markup("<h3>Per step</h3>") + frame_html(section.steps, rows=STEP_ROWS))
    parts.append(Markup("<h3>{}</h3>").format(section.summary_title) + frame_html(section.summary, rows=None))
    for key, (title, _, _) in TOPS.items():
        frame = section.tops[key]
        if frame.height:
            parts.append(Markup("<h3>{}</h3>").format(title) + frame_html(frame, rows=None))
        else:
            parts.append(Markup('<p class="kl-left-out">{}</p>').format(section.empty_line(key)))
    return Markup("\n").join(parts)


def critical_path_md(data: Any) -> list[str]:
    """The section as markdown parts (none where the report was made without it)."""
    section = _section(data)
    if section is None:
        return []
    if isinstance(section, str):
        return [f"\n_{section}_\n"]
    out = [f"\n## {TITLE}\n", f"**{section.verdict}**\n"]
    out += [f"_{n}_\n" for n in section.notes]
    out += ["\n### Per step\n", frame_md(section.steps, rows=STEP_ROWS)]
    out += [f"\n### {section.summary_title}\n", frame_md(section.summary, rows=None)]
    for key, (title, _, _) in TOPS.items():
        frame = section.tops[key]
        out += [f"\n### {title}\n", frame_md(frame, rows=None)] if frame.height else [f"\n_{section.empty_line(key)}_\n"]
    return out
