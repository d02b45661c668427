"""``kinetolens summary`` of a trace read a step window at a time says what the whole trace says.

From 1.5 GB of JSON the summary decodes the file to Parquet parts and builds
one step's window at a time (:mod:`kinetolens.runs.windowed_read`), so
memory holds a step.  Its figures are sums of each window's own events: on
traces of up to eight steps (the sample of whole steps is then all of them)
the whole JSON summary is equal, recommendations included; on longer traces
every figure but the sampled ones is, and ``read_in_windows`` names the sample.
``--windows`` forces the windowed read on the small traces of the corpus.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import kinetolens.runs.window_choice as window_choice
import kinetolens.runs.windowed_read as windowed_read
from kinetolens.analysis.summary_windows import PER_WINDOW
from kinetolens.cli.main import cli
from kinetolens.cli.load_options import TraceLoading
from kinetolens.cli.summary_output import summary_of
from kinetolens.registry.words import counted
from tests.conftest import trace_path

SAME = [
    "hta/df_index_resolver/df_index_resolver.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
]


def _summary(path: Path, mode: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(cli, ["summary", mode, "--json", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _comparable(summary: dict) -> dict:  # type: ignore[type-arg]
    """``summary`` less how it was read: GPU figures to 12 digits (each window's
    sums are added in another order), the model's warnings without the words
    saying they were counted per window (their counts are checked apart)."""
    out = {k: v for k, v in summary.items() if k not in ("read_in_windows", "warnings")}
    out["gpu"] = [{k: float(f"{v:.12g}") if isinstance(v, float) else v for k, v in row.items()} for row in summary["gpu"]]
    return out


def _same_warnings(windowed: list[dict], whole: list[dict]) -> None:  # type: ignore[type-arg]
    # A range at a window's edge is in two windows: a model warning counts it in each.
    assert len(windowed) == len(whole)
    for w, g in zip(windowed, whole, strict=True):
        assert (w["kind"], w["detail"].removesuffix(PER_WINDOW)) == (g["kind"], g["detail"])
        assert w["count"] == g["count"] if w["detail"] == g["detail"] else w["count"] >= g["count"]


@pytest.mark.parametrize("rel", SAME, ids=[Path(r).parent.name for r in SAME])
def test_windowed_summary_equals_the_whole_one(rel: str) -> None:
    whole, windowed = _summary(trace_path(rel), "--whole"), _summary(trace_path(rel), "--windows")
    assert whole["read_in_windows"] is None
    assert windowed["read_in_windows"].startswith(f"read a step window at a time ({counted(whole['steps']['count'], 'step')})")
    assert _comparable(windowed) == _comparable(whole)
    _same_warnings(windowed["warnings"], whole["warnings"])


def test_a_long_trace_sums_every_step_and_names_its_sample(many_steps: Path) -> None:
    whole, windowed = _summary(many_steps, "--whole"), _summary(many_steps, "--windows")
    assert whole["steps"]["count"] == 14
    middle = whole["steps"]["ids"][3:11]  # eight whole steps in the middle
    assert windowed["read_in_windows"].endswith(f"from steps {middle[0]}-{middle[-1]} (8 of 14 whole steps)")
    # Everything summed over the trace is the whole trace's; only the sampled
    # recommendations (and where they were sampled) may differ.
    same, got = _comparable(whole), _comparable(windowed)
    for key in ("steps", "events", "attribution", "unrecorded_launches", "memory", "span_us", "devices_used", "kind", "devices", "gpu"):
        assert got[key] == same[key], key
    _same_warnings(windowed["warnings"], whole["warnings"])


def test_a_trace_without_steps_is_read_whole() -> None:
    path = trace_path("tracelens/b200/eager_trace.json.gz")
    windowed = _summary(path, "--windows")
    assert windowed["read_in_windows"] is None
    assert windowed == _summary(path, "--whole")


def test_the_default_reads_a_large_file_in_windows_and_a_small_one_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    path = trace_path("hta/df_index_resolver/df_index_resolver.json.gz")
    by_size = TraceLoading(cache=False)
    assert summary_of(str(path), by_size).read_in_windows is None  # 54 MB of JSON, not forced
    monkeypatch.setattr(window_choice, "WINDOWED_FROM_BYTES", 50_000_000)
    summary = summary_of(str(path), by_size)
    assert summary is not None and summary.read_in_windows is not None
    # --whole reads whole however large the file
    assert summary_of(str(path), TraceLoading(cache=False), windows=False).read_in_windows is None


def test_a_windowed_summary_is_cached_without_tables_until_a_whole_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(trace_path(SAME[0]))
    opened: list[Path] = []
    real = windowed_read.open_windows

    def counted(trace: Path, folder: str) -> object:
        opened.append(trace)
        return real(trace, folder)

    monkeypatch.setattr(windowed_read, "open_windows", counted)
    env = {"KINETOLENS_CACHE_DIR": str(tmp_path / "cache")}
    first = CliRunner().invoke(cli, ["summary", "--windows", "-w", "120", path], env=env, catch_exceptions=False)
    second = CliRunner().invoke(cli, ["summary", "--windows", "-w", "120", path], env=env, catch_exceptions=False)
    assert first.exit_code == second.exit_code == 0
    assert second.output == first.output and len(opened) == 1  # the second run read the stored summary
    (entry,) = (tmp_path / "cache").iterdir()
    assert sorted(f.name for f in entry.iterdir()) == ["checksum", "summary_windows.derived.json"]
    # A whole load stores the tables in that entry, quietly (the entry was not damaged).
    whole = CliRunner().invoke(cli, ["summary", "--whole", path], env=env, catch_exceptions=False)
    assert whole.exit_code == 0 and "damaged" not in whole.output and "cannot write" not in whole.output
    assert (entry / "kernels.arrow").is_file() and (entry / "summary_whole.derived.json").is_file()


def test_a_kernel_launched_steps_before_it_runs_counts_once(tmp_path: Path) -> None:
    # The last kernel's launch moved into the first step: the kernel runs four
    # steps after it was launched, in another step's window than its launch.
    doc = json.loads(gzip.decompress(trace_path(SAME[0]).read_bytes()))
    events = doc["traceEvents"]
    kernel = max((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    launch = next(e for e in events if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") == kernel["args"]["correlation"])
    first = min((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    launch["ts"] = first["ts"] + 50
    path = tmp_path / "late.json"
    path.write_text(json.dumps(doc))
    whole, windowed = _summary(path, "--whole"), _summary(path, "--windows")
    assert windowed["events"]["kernels"] == whole["events"]["kernels"]
    assert _comparable(windowed) == _comparable(whole)


def test_the_files_warnings_are_said_once_as_the_whole_read_says_them(tmp_path: Path) -> None:
    # Impossible device properties and an event a day away: warnings of the
    # file, not of a window (they were once counted in every window).
    doc = json.loads(gzip.decompress(trace_path(SAME[0]).read_bytes()))
    doc["deviceProperties"][0].update(totalGlobalMem=-1, numSms=-4)
    next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")["ts"] = 1.0
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    whole, windowed = _summary(path, "--whole"), _summary(path, "--windows")
    assert [w["kind"] for w in whole["warnings"]] == ["device properties dropped", "events skipped"]
    assert windowed["warnings"] == whole["warnings"]
    assert _comparable(windowed) == _comparable(whole)
