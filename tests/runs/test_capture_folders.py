"""vLLM's graph-capture folder: its execution_details.json is metadata, not a
trace, and the folder belongs to its replay run rather than being a run."""

from __future__ import annotations

from pathlib import Path


from kinetolens.logdir import find_runs
from tests.conftest import place, trace_path
from tests.dashboard_helpers import dashboard_server
from tests.terminal import run_many

CASES = ("tracelens/inference/vllm_prefilldecode_piecewise", "tracelens/inference/xdit_flux.1")


def test_execution_details_is_rejected_as_graph_capture_metadata() -> None:
    paths = {case: str(trace_path(f"{case}/capture_traces/execution_details.json")) for case in CASES}
    procs = run_many({case: (("summary", path), 80) for case, path in paths.items()})
    for case, proc in procs.items():
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout)
        lines = proc.stderr.splitlines()
        assert len(lines) == 1, proc.stderr
        assert paths[case] in lines[0] and "graph-capture metadata" in lines[0] and "not a trace" in lines[0]


def _logdir(tmp_path: Path) -> Path:
    """The vLLM case as a run of a logdir: its replay trace and capture_traces/ beside it (copied from the corpus)."""
    src = trace_path(CASES[0])
    run = tmp_path / "logdir" / "vllm"
    (run / "capture_traces").mkdir(parents=True)
    place(run / "graph_execution.json.gz", src / "graph_execution.json.gz")  # copies: links out of a logdir are not served
    for f in (src / "capture_traces").iterdir():
        place(run / "capture_traces" / f.name, f)
    return tmp_path / "logdir"


def test_capture_folder_is_not_a_run_of_its_own(tmp_path: Path) -> None:
    logdir = _logdir(tmp_path)
    runs = find_runs(logdir)
    assert list(runs) == ["vllm"], runs
    assert [t.path.name for t in runs["vllm"]] == ["graph_execution.json.gz"]
    with dashboard_server(logdir) as srv:
        status, body = srv.get_json("/api/runs")
    assert status == 200
    assert [r["run"] for r in body["runs"]] == ["vllm"], body
