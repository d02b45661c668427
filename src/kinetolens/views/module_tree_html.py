"""The nn.Module tree as a collapsible HTML table (``<details>`` per module, no script).

Rows come from :func:`kinetolens.analysis.hardware.module_tree.module_tree` as they
are (parents first); the roots and their children start open, deeper
levels closed, so a 24-layer model reads as its layers until one is opened.
"""

from __future__ import annotations

import html

import polars as pl
from markupsafe import Markup

from kinetolens.views import units

#: Shown columns and their headers.
COLUMNS = {
    "fwd_total_us": "fwd total",
    "bwd_total_us": "bwd total",
    "self_us": "self",
    "total_us": "total",
    "step_share_pct": "% step",
    "tflops_s": "TFLOP/s",
    "pct_of_roof": "% roof",
}
#: Levels open when the page loads.
OPEN_DEPTH = 1
_STYLE = """<style>
.kl-mtree{font-size:13px;margin:.5em 0}
.kl-mtree .r{display:grid;grid-template-columns:minmax(16em,1fr) repeat(7,7.5em);gap:0 .6em;padding:1px 0;
 border-bottom:1px solid #eee}
.kl-mtree .h{font-weight:600;border-bottom:1px solid #999}
.kl-mtree .n{text-align:right;font-variant-numeric:tabular-nums}
.kl-mtree summary{list-style:none;cursor:pointer}
.kl-mtree summary::-webkit-details-marker{display:none}
.kl-mtree summary .k::before{content:"\\25B8  ";color:#888}
.kl-mtree details[open]>summary .k::before{content:"\\25BE  "}
.kl-mtree .leaf .k::before{content:"\\00B7  ";color:#bbb}
.kl-mtree .k{overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
</style>"""


def _row(node: dict, texts: list[str], cls: str = "") -> str:
    pad = f"padding-left:{1.2 * node['depth']:.1f}em"
    key = f'<span class="k" style="{pad}" title="{html.escape(node["path"])}">{html.escape(node["name"])}</span>'
    cells = "".join(f'<span class="n">{html.escape(t)}</span>' for t in texts)
    return f'<div class="r {cls}">{key}{cells}</div>'


def module_tree_html(tree: pl.DataFrame) -> Markup:
    """Nested ``<details>``: each module with children opens onto them."""
    if tree.height == 0:
        return Markup("<p>No nn.Module hierarchy in this trace.</p>")
    rows = tree.to_dicts()
    shown = tree.select(c for c in COLUMNS if c in tree.columns)
    # the report's cell format (units.display): one time unit per column, named in its header
    columns, texts = units.display(shown, shown)
    text_of = {r["path"]: t for r, t in zip(rows, texts)}
    children: dict[str | None, list[dict]] = {}
    for r in rows:
        children.setdefault(r["parent"], []).append(r)
    out = [_STYLE, '<div class="kl-mtree">', '<div class="r h"><span>module</span>']
    heads = [COLUMNS[c["name"]] + (f" ({c['label'].rsplit('(', 1)[1]}" if c["kind"] == "time" else "") for c in columns]
    out += [f'<span class="n">{html.escape(h)}</span>' for h in heads]
    out.append("</div>")

    def emit(node: dict) -> None:
        kids = children.get(node["path"], [])
        if not kids:
            out.append(_row(node, text_of[node["path"]], "leaf"))
            return
        opened = " open" if node["depth"] < OPEN_DEPTH else ""
        out.append(f"<details{opened}><summary>{_row(node, text_of[node['path']])}</summary>")
        for kid in kids:
            emit(kid)
        out.append("</details>")

    for root in children.get(None, []):
        emit(root)
    out.append("</div>")
    return Markup("".join(out))
