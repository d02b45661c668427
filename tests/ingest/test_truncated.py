"""A truncated trace: analyses whose inputs were cut say so or stay silent.

"""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kinetolens
from kinetolens.analysis.summary import summarize
from kinetolens.views import report_data
from kinetolens.views.report_md import render_md
from tests.conftest import trace_path

RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
#: Kineto writes host ops first: cut at 40% of the JSON, no kernel, launch or memory event is left.
KEEP = 0.4


@pytest.fixture(scope="module")
def cut_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = gzip.decompress(trace_path(RESNET).read_bytes())
    path = tmp_path_factory.mktemp("cut") / "worker0.pt.trace.json"
    path.write_bytes(data[: int(len(data) * KEEP)])
    return path


@pytest.fixture(scope="module")
def cut_gzip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole trace gzipped, then the gzip stream cut (a copy that stopped early)."""
    packed = gzip.compress(gzip.decompress(trace_path(RESNET).read_bytes()))
    path = tmp_path_factory.mktemp("cutgz") / "worker0.pt.trace.json.gz"
    path.write_bytes(packed[: int(len(packed) * KEEP)])
    return path


@pytest.mark.parametrize("which", ["cut_json", "cut_gzip"])
def test_no_advice_from_a_trace_that_lost_its_kernels(which: str, request: pytest.FixtureRequest) -> None:
    # this used to recommend fixing "input loading stalls" (40% of each step
    # in DataLoader with no GPU work running): the GPU work was in the part of the file that was lost.
    trace = kinetolens.load(request.getfixturevalue(which), cache=False)
    assert trace.kernels.height == 0 and trace.ops.height > 0 and trace.steps.height > 0
    info = summarize(trace)
    assert info.recommendations == ()
    withheld = info.recommendations_withheld
    assert withheld.startswith("the file is truncated") and "every GPU kernel (the file lists 4 GPUs)" in withheld
    assert info.steps.damaged is True
    md = render_md(report_data.collect(trace))
    assert f"No recommendations: {withheld}." in md and "Input loading" not in md


def test_the_warning_says_what_was_kept(cut_json: Path) -> None:
    # No share of the bytes read: the file is what is
    # left of a longer trace, so "99.99% kept" would claim nearly all of it.
    (warning,) = [w for w in kinetolens.load(cut_json, cache=False).warnings if w.kind == "truncated JSON"]
    m = re.fullmatch(r"the file ends mid-event: kept the first ([\d,]+) events \(([\d,]+) bytes\), dropped the "
                     r"([\d,]+) bytes of the event cut off; how much of the trace is missing is unknown", warning.detail)
    assert m, warning.detail
    events, kept, dropped = (int(g.replace(",", "")) for g in m.groups())
    assert kept + dropped == cut_json.stat().st_size and 0 < dropped < 10_000
    assert events == cut_json.read_bytes()[:kept].count(b'"ph":')
    assert "%" not in warning.detail


def test_terminal_summary_of_a_truncated_trace(cut_json: Path) -> None:
    # what a user sees at 80 columns.
    out = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "summary", str(cut_json), "--no-cache"],
        capture_output=True, text=True, check=True,
        env={**os.environ, "COLUMNS": "80"},
    ).stdout
    flat = " ".join(out.split())
    assert "No recommendations: the file is truncated" in flat
    assert "the file is damaged (see below): these steps lack the events it lost" in flat
    assert "Input loading" not in flat and "What to change first" not in flat


def test_a_whole_trace_still_gets_advice() -> None:
    # the rule only silences damaged inputs.
    info = summarize(kinetolens.load(trace_path(RESNET)))
    assert info.recommendations_withheld is None and info.recommendations


def test_no_advice_when_many_events_were_malformed(tmp_path: Path) -> None:
    # half the kernels of a trace unreadable
    # (a "ts" that is not a number) used to leave "low GPU utilization 2.6%" as advice.
    import json

    doc = json.loads(gzip.decompress(trace_path("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz").read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels[1::2]:
        e["ts"] = "bad"
    path = tmp_path / "half.json"
    path.write_text(json.dumps(doc))
    info = summarize(kinetolens.load(path, cache=False))
    assert info.recommendations == ()
    assert info.recommendations_withheld.startswith(f"{len(kernels[1::2])} events (")
    assert "malformed and skipped" in info.recommendations_withheld
