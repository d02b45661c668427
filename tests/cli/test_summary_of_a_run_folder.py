"""``kinetolens summary RUNDIR`` on the folder ``kinetolens run`` writes:
each rank summarised, and ``dist`` named for comparing them."""

from __future__ import annotations

import json
from pathlib import Path

from kinetolens.formats import LATEST_RUN
from tests.conftest import trace_path
from tests.terminal import run_many

RANKS = ("param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json.gz",
         "param/dlrm_kineto/worker1_step_12.1694128201556.pt.trace.json.gz")  # fmt: skip


def test_summary_takes_a_run_folder(tmp_path: Path) -> None:
    job = tmp_path / "runs" / "job"
    run = job / "20260101-000000"
    run.mkdir(parents=True)
    for rel in RANKS:
        (run / Path(rel).name).symlink_to(trace_path(rel))
    (job / LATEST_RUN).symlink_to(run.name)
    procs = run_many({"text": (("summary", str(job)), 120), "json": (("summary", str(run), "--json"), None)})
    text = procs["text"]
    assert text.returncode == 0, text.stderr
    assert text.stdout.count("kinetolens summary:") == 2, text.stdout
    assert f"kinetolens dist {job} compares the ranks" in " ".join(text.stdout.split())
    infos = json.loads(procs["json"].stdout)
    assert [i["rank"] for i in infos] == [0, 1]
