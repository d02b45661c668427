"""``kinetolens.profile(counters=[...])``: presets resolve to CUPTI metric
names, and where counters cannot be collected the profile refuses to start
with one line naming what is missing, instead of torch's silent empty
result.  On a CUDA machine the counters really reach the trace."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import kinetolens
from kinetolens.capture import CaptureUnsupportedError
from kinetolens.capture import profile as kl_profile
from kinetolens.capture.counter_presets import DESCRIPTIONS, PRESETS
from kinetolens.capture import counters as hw
from kinetolens.capture.counters import resolve
from kinetolens.capture.profile import _RUNNING

CUPTI_OK = torch.cuda.is_available() and torch.version.cuda is not None and not getattr(torch.version, "hip", None)


def test_presets_are_documented_metric_names() -> None:
    assert {"roofline", "tensor_cores"} <= set(PRESETS)
    assert set(DESCRIPTIONS) == set(PRESETS)
    for name, metrics in PRESETS.items():
        assert metrics and all("__" in m for m in metrics), name
        assert len(set(metrics)) == len(metrics), name
    roofline = set(PRESETS["roofline"])
    assert {"dram__bytes_read.sum", "dram__bytes_write.sum"} <= roofline  # bytes
    assert "kineto__cuda_core_flops" in roofline  # and floating point work


def test_resolve_expands_presets_in_order_once() -> None:
    assert resolve("tensor_cores") == list(PRESETS["tensor_cores"])
    got = resolve(["tensor_cores", "roofline", "sm__cycles_elapsed.avg", "dram__bytes_read.sum"])
    assert got == [
        "kineto__tensor_core_insts",
        "kineto__cuda_core_flops",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "sm__cycles_elapsed.avg",
    ]


@pytest.mark.parametrize("bad", [["rooflines"], [""], [], [3]])
def test_resolve_rejects_bad_names(bad: list[object]) -> None:
    with pytest.raises(ValueError, match="counter"):
        resolve(bad)  # type: ignore[arg-type]


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(ValueError) as err:
        kl_profile(counters=["flops"])
    assert "roofline" in str(err.value) and "tensor_cores" in str(err.value)


def test_counters_conflicting_options_rejected() -> None:
    with pytest.raises(CaptureUnsupportedError, match="profile_device=False"):
        kl_profile(counters=["roofline"], profile_device=False)
    with pytest.raises(ValueError, match="not both"):
        kl_profile(counters=["roofline"], experimental_config=object())


@pytest.mark.skipif(CUPTI_OK, reason="this machine can collect CUPTI counters")
def test_unsupported_build_or_device_refuses_clearly(tmp_path: Path) -> None:
    prof = kl_profile(logdir=tmp_path, run="hw", counters=["roofline"])
    with pytest.raises(CaptureUnsupportedError) as err, prof:
        pytest.fail("the block must not run")
    message = str(err.value)
    assert isinstance(err.value, ValueError)
    assert "\n" not in message
    assert message.startswith("kinetolens.profile: cannot collect hardware counters (kineto__cuda_core_flops, ")
    if not torch.backends.cuda.is_built():
        assert message.endswith(f"this torch build ({torch.__version__}) has no CUDA support")
    else:
        assert message.endswith("no CUDA device is available")
    # nothing was started: no profile running, no files, a new one can start
    assert not prof.running and not _RUNNING
    assert not list(tmp_path.rglob("*"))
    with kl_profile(logdir=tmp_path, run="after", profile_memory=False, with_stack=False) as again:
        torch.ones(2) + 1
    assert len(again.trace_files) == 1


@pytest.mark.skipif(CUPTI_OK, reason="this machine can collect CUPTI counters")
def test_run_reports_unsupported_counters(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch, kinetolens
            for _ in range(4):
                torch.ones(4) * 2
                kinetolens.step()
            print("done")
            """
        )
    )
    res = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "run", "--logdir", str(tmp_path / "runs"),
         "--counters", "roofline,tensor_cores", "--", sys.executable, str(script)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    # The job itself is not disturbed, but the profile it was run for failed
    #: exit 2, and one line saying why.
    assert res.returncode == 2, res.stderr
    assert res.stdout == "done\n"
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("kinetolens:")]
    assert line.startswith(f"kinetolens: no trace written to {tmp_path / 'runs' / 'job'}: could not start profiling: ")
    assert "cannot collect hardware counters" in line and "warmup" not in line
    assert not list((tmp_path / "runs").rglob("*.gz"))


def test_run_rejects_unknown_counter_before_starting(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "run", "--counters", "rooflin", "--",
         sys.executable, "-c", "print('ran')"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "ran" not in res.stdout
    assert "unknown counter 'rooflin'" in res.stderr


def test_the_installed_torch_says_which_counter_path_it_offers() -> None:
    """torch 2.13's profiler writes Kineto's range-profiler key; its CPU build
    has no PM-sampling profiler (a CUDA build of a newer torch may)."""
    paths = hw.counter_paths()
    assert hw.RANGE_PROFILER in paths or hw.PM_SAMPLING in paths
    if not torch.backends.cuda.is_built():
        assert paths == (hw.RANGE_PROFILER,)


@pytest.mark.parametrize(
    ("contents", "paths"),
    [
        ([b"..CUPTI_PROFILER_METRICS=.."], (hw.RANGE_PROFILER,)),
        ([b"..CUPTI PM Sampling..", b"..HARDWARE_COUNTERS.."], (hw.PM_SAMPLING,)),
        # Kineto built with PM sampling, but torch never asks for its activity: no PM path
        ([b"..CUPTI PM Sampling..hardware_counters.."], ()),
        ([b"..CUPTI_PROFILER_METRICS..", b"..CUPTI PM Sampling..HARDWARE_COUNTERS"], (hw.RANGE_PROFILER, hw.PM_SAMPLING)),
        ([b"nothing here"], ()),
    ],
)
def test_counter_paths_read_from_the_libraries(tmp_path: Path, contents: list[bytes], paths: tuple[str, ...]) -> None:
    for i, data in enumerate(contents):  # markers spread over several libraries, as in a CUDA build
        (tmp_path / f"libtorch_part{i}.so").write_bytes(b"\0" * 4096 + data + b"\0" * 4096)
    (tmp_path / "libother.so").write_bytes(b"CUPTI_PROFILER_METRICS")  # not torch's: not read
    markers = [m for ms in hw.PATH_MARKERS.values() for m in ms]
    assert hw.paths_offered(hw.library_markers(tmp_path, markers)) == paths


def test_pm_sampling_rejects_range_profiler_aggregates() -> None:
    reason = hw.metrics_reason(list(PRESETS["roofline"]), hw.PM_SAMPLING)
    assert reason is not None and "kineto__cuda_core_flops" in reason and "sm__cycles_active.avg" in reason
    assert hw.metrics_reason(["sm__cycles_active.avg", "dram__bytes_read.sum"], hw.PM_SAMPLING) is None
    assert hw.metrics_reason(list(PRESETS["roofline"]), hw.RANGE_PROFILER) is None


def test_pm_sampling_options_reach_kineto_as_config_lines() -> None:
    """torch writes ``custom_profiler_config`` after ``CUSTOM_CONFIG=`` in
    Kineto's ``KEY=value`` lines, so each further line sets a Kineto key."""
    metrics = ["sm__cycles_active.avg", "dram__bytes_read.sum"]
    options = hw.experimental_options(
        metrics, False, cuda_profiled=True, sync_events=True, path=hw.PM_SAMPLING, device=3
    )
    lines = options["custom_profiler_config"].split("\n")
    assert lines[1:] == ["CUPTI_PM_SAMPLING_METRICS=sm__cycles_active.avg,dram__bytes_read.sum",
                         "CUPTI_PM_SAMPLING_DEVICE_ID=3"]  # fmt: skip
    assert "profiler_metrics" not in options and options["enable_cuda_sync_events"] is True
    config = hw.experimental_config(options)  # the installed torch takes them
    assert config is not None
    assert hw.experimental_options(metrics, True, cuda_profiled=True, sync_events=False) == {
        "profiler_metrics": metrics, "profiler_measure_per_kernel": True
    }


def test_the_path_is_said_in_one_line() -> None:
    for path, per_kernel in ((hw.RANGE_PROFILER, True), (hw.RANGE_PROFILER, False), (hw.PM_SAMPLING, False)):
        line = hw.path_line(path, per_kernel)
        assert "\n" not in line and line.startswith(f"kinetolens: counters: {path}")
    assert "per kernel" in hw.path_line(hw.RANGE_PROFILER, True)
    assert "every millisecond" in hw.path_line(hw.PM_SAMPLING, False)


@pytest.mark.skipif(not CUPTI_OK, reason="CUPTI counters need a CUDA build and an NVIDIA device")
def test_counters_reach_the_trace(tmp_path: Path) -> None:
    if hw.counter_paths()[:1] != (hw.RANGE_PROFILER,):
        pytest.skip(f"this torch collects counters by {hw.counter_paths()}: tests/gpu/test_gpu_counters.py covers it")
    a = torch.randn(256, 256, device="cuda")
    with kl_profile(logdir=tmp_path, run="hw", counters=["roofline"], with_stack=False) as prof:
        for _ in range(3):
            a @ a
        torch.cuda.synchronize()
    (trace,) = prof.trace_files
    import gzip
    import json

    with gzip.open(trace, "rt") as fh:
        evs = json.load(fh)["traceEvents"]
    ranges = [e for e in evs if e.get("cat") == "cuda_profiler_range"]
    assert ranges, "no counter ranges in the trace"
    assert any("dram__bytes_read.sum" in e.get("args", {}) for e in ranges)
    meta = json.loads(trace.with_name(trace.name.replace(".pt.trace.json.gz", ".kinetolens.json")).read_text())
    assert meta["options"]["counters"] == list(PRESETS["roofline"])
    assert kinetolens.load(trace, cache=False) is not None


def _plain(gz: Path, out: Path) -> Path:
    import gzip

    out.write_bytes(gzip.decompress(gz.read_bytes()))
    return out


def test_a_trace_without_counter_values_is_told_apart(tmp_path: Path) -> None:
    # A torch can accept the counters' configuration and record none (torch 2.11 with
    # CUDA 13 on an H200 did: no CUPTI range profiler in its Kineto); the profile then
    # says so.  The check reads the exported trace: Kineto's own counter events or none.
    from tests.analysis.hardware.test_pm_sampling import BASE, with_samples
    from tests.conftest import trace_path

    ranges = _plain(trace_path("hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz"), tmp_path / "ranges.json")
    assert hw.recorded(ranges, hw.RANGE_PROFILER) and not hw.recorded(ranges, hw.PM_SAMPLING)
    plain = _plain(trace_path(BASE), tmp_path / "plain.json")
    assert not hw.recorded(plain, hw.RANGE_PROFILER) and not hw.recorded(plain, hw.PM_SAMPLING)
    sampled, _ = with_samples(tmp_path / "sampled.json", 1000)
    assert hw.recorded(sampled, hw.PM_SAMPLING) and not hw.recorded(sampled, hw.RANGE_PROFILER)
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    assert not hw.recorded(empty, hw.RANGE_PROFILER)
    line = hw.none_recorded_line(hw.RANGE_PROFILER)
    assert line.startswith("kinetolens: counters: none recorded: ") and torch.__version__ in line and "\n" not in line


def test_a_cuda_trace_without_gpu_activity_is_told_apart(tmp_path: Path) -> None:
    # Under Nsight Compute Kineto records no GPU activity (ncu holds CUPTI): the
    # H200 trace of a step profiled under ncu has none, the same step's own trace has it
    data = Path(__file__).resolve().parents[1] / "data" / "gpu"
    under_ncu = _plain(data / "under_ncu.pt.trace.json.gz", tmp_path / "under_ncu.json")
    alone = _plain(data / "ncu_step.pt.trace.json.gz", tmp_path / "alone.json")
    assert not hw.gpu_activity_recorded(under_ncu) and hw.gpu_activity_recorded(alone)
    assert "\n" not in hw.NO_GPU_ACTIVITY_LINE and "--ncu" in hw.NO_GPU_ACTIVITY_LINE
