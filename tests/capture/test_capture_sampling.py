"""kinetolens.profile(sample_rate=N): memory sampled every N ops, with real torch on the CPU."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import kinetolens
from kinetolens.capture.memory_sampling import SAMPLE_EVENT, MemorySampler


def _train(steps: int, prof=None) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if prof is not None:
            prof.step()


def _samples(path: Path) -> tuple[list[dict], list[dict]]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc["traceEvents"]
    return [e for e in events if e.get("name") == SAMPLE_EVENT], [e for e in events if e.get("ph") == "X"]


def test_samples_every_n_ops_in_the_trace(tmp_path: Path) -> None:
    with kinetolens.profile(logdir=tmp_path, run="sampled", sample_rate=5, with_stack=False) as prof:
        _train(3)
        sampler = prof._sampler
        assert isinstance(sampler, MemorySampler)
        assert any(isinstance(m, MemorySampler) for m in torch.utils._python_dispatch._get_current_dispatch_mode_stack())
    (path,) = prof.trace_files
    samples, ops = _samples(path)
    # One sample per 5 dispatched aten ops (forward, backward and optimizer).
    assert sampler.ops > 100
    assert len(samples) == sampler.ops // 5
    # The profiler records every one of those ops too (plus the composite ones
    # above them and annotations), so ops/N from the trace is an upper bound.
    aten = [e for e in ops if e.get("cat") == "cpu_op"]
    assert sampler.ops <= len(aten) and len(samples) <= len(aten) // 5 + 1
    # CPU run: the process's resident memory, a real and plausible number.
    assert all(s["cat"] == "cpu (process RSS)" for s in samples)
    rss = [s["args"]["allocated"] for s in samples]
    assert min(rss) > 10 * 2**20 and max(rss) < 64 * 2**30
    # On the trace's clock: inside the span of the recorded ops.
    first, last = min(e["ts"] for e in ops), max(e["ts"] + e.get("dur", 0) for e in ops)
    assert all(first <= s["ts"] <= last for s in samples)
    assert [s["ts"] for s in samples] == sorted(s["ts"] for s in samples)
    # The trace still loads.
    assert kinetolens.load(path, cache=False).ops.height > 0


def test_no_sample_rate_installs_nothing(tmp_path: Path) -> None:
    seen = []

    class Probe:
        def __init__(self, prof) -> None:  # type: ignore[no-untyped-def]
            self.prof = prof

        def step(self) -> None:
            seen.append(list(torch.utils._python_dispatch._get_current_dispatch_mode_stack()))
            self.prof.step()

    with kinetolens.profile(logdir=tmp_path, run="plain", with_stack=False) as prof:
        _train(2, Probe(prof))
        assert prof._sampler is None
    assert seen == [[], []]
    (path,) = prof.trace_files
    samples, _ = _samples(path)
    assert samples == []


def test_bad_sample_rate_is_a_clear_error(tmp_path: Path) -> None:
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="sample_rate must be a positive integer"):
            kinetolens.profile(logdir=tmp_path, sample_rate=bad)


# -- reading the samples back -------------------------------------------------


def _raw_samples(path: Path) -> list[dict]:
    return _samples(path)[0]


@pytest.fixture(scope="module")
def sampled_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A real CPU run sampled every 5 ops, with the allocator's events too."""
    logdir = tmp_path_factory.mktemp("sampled")
    with kinetolens.profile(logdir=logdir, run="sampled", sample_rate=5, with_stack=False) as prof:
        _train(3)
        ops = prof._sampler.ops
    (path,) = prof.trace_files
    return path, ops


def test_samples_read_back_equal_the_raw_json(sampled_run: tuple[Path, int], tmp_path: Path) -> None:
    from kinetolens.analysis.memory.samples import SAMPLE_EVENT as READ_NAME
    from kinetolens.analysis.memory.samples import memory_samples, sample_summary

    assert READ_NAME == SAMPLE_EVENT  # the analysis reads what the capture writes
    path, ops = sampled_run
    raw = _raw_samples(path)
    # Loaded twice: decoded, then from the cache; both the same curve.
    first = kinetolens.load(path, cache=tmp_path)
    cached = kinetolens.load(path, cache=tmp_path)
    assert any(tmp_path.glob("*/counters.arrow"))
    curve = memory_samples(first)
    assert curve.equals(memory_samples(cached))
    assert curve.height == len(raw) == ops // 5 > 20
    assert curve["device"].unique().to_list() == ["cpu (process RSS)"]
    assert curve["allocated"].to_list() == [s["args"]["allocated"] for s in raw]
    assert curve["op_index"].to_list() == [5 * (i + 1) for i in range(len(raw))]
    assert curve["reserved"].null_count() == curve.height  # RSS is one figure
    # Trace nanoseconds, on the same clock as the ops (float us -> ns, within rounding).
    for ts, s in zip(curve["ts"].to_list(), raw):
        assert abs(ts - s["ts"] * 1000) <= 1
    ops_ts = first.ops["ts"]
    assert ops_ts.min() <= curve["ts"].min() and curve["ts"].max() <= (first.ops["ts"] + first.ops["dur"]).max()

    (row,) = sample_summary(curve).to_dicts()
    rss = [s["args"]["allocated"] for s in raw]
    assert row["samples"] == len(raw) and row["every_n_ops"] == 5 and row["ops"] == 5 * len(raw)
    assert (row["min_allocated"], row["max_allocated"]) == (min(rss), max(rss))
    assert row["peak_ts"] == curve["ts"][rss.index(max(rss))]
    assert row["peak_reserved"] is None


def test_memory_command_shows_the_sampled_section(sampled_run: tuple[Path, int]) -> None:
    path, _ = sampled_run
    raw = _raw_samples(path)
    text = _cli("memory", str(path), "--no-cache")
    assert text.returncode == 0, text.stderr
    assert "Sampled memory (every 5 ops" in text.stdout and "cpu (process RSS)" in text.stdout
    doc = json.loads(_cli("memory", str(path), "--json", "--no-cache").stdout)
    (row,) = doc["sampled"]
    assert row["samples"] == len(raw) and row["every_n_ops"] == 5
    assert row["max_allocated"] == max(s["args"]["allocated"] for s in raw)
    assert [s["allocated"] for s in doc["samples"]] == [s["args"]["allocated"] for s in raw]
    assert doc["devices"][0]["device"] == "CPU"  # the allocator's report is still there


def test_samples_alone_are_reported_without_allocator_events(tmp_path: Path) -> None:
    with kinetolens.profile(logdir=tmp_path, run="rss", sample_rate=4, with_stack=False, profile_memory=False) as prof:
        _train(2)
    (path,) = prof.trace_files
    assert kinetolens.load(path, cache=False).memory.height == 0
    text = _cli("memory", str(path), "--no-cache")
    assert text.returncode == 0, text.stderr
    assert "memory samples only" in text.stdout and "Sampled memory (every 4 ops" in text.stdout
    doc = json.loads(_cli("memory", str(path), "--json", "--no-cache").stdout)
    assert doc["devices"] == [] and doc["sampled"][0]["samples"] == len(_raw_samples(path))
    svg = _cli("memory", str(path), "--no-cache", "--svg", str(tmp_path / "x.svg"))
    assert svg.returncode == 2 and "no memory-flow picture" in svg.stderr and "Traceback" not in svg.stderr
    assert "memory samples only" in svg.stdout  # what can be shown still is


def test_trace_without_samples_has_no_sampled_section(tmp_path: Path) -> None:
    with kinetolens.profile(logdir=tmp_path, run="plain", with_stack=False) as prof:
        _train(2)
    (path,) = prof.trace_files
    text = _cli("memory", str(path), "--no-cache")
    assert text.returncode == 0, text.stderr
    assert "memory peaks" in text.stdout and "Sampled memory" not in text.stdout
    doc = json.loads(_cli("memory", str(path), "--json", "--no-cache").stdout)
    assert doc["sampled"] == [] and doc["samples"] == []


def test_memory_figure_draws_the_samples(sampled_run: tuple[Path, int]) -> None:
    from kinetolens.analysis.memory.samples import memory_samples, sample_figure_curve
    from kinetolens.views.figures import memory_figure

    curve = memory_samples(kinetolens.load(sampled_run[0], cache=False))
    fig = memory_figure(sample_figure_curve(curve))
    (line,) = fig["data"]  # allocated only: RSS has no reserved figure
    assert line["name"] == "sampled cpu (process RSS) allocated"
    scale = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10}[fig["layout"]["yaxis"]["title"]["text"]]  # the unit fits the peak
    assert list(line["y"]) == pytest.approx((curve["allocated"] / scale).to_list())


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}  # tables at full width, no folded cells
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args], check=False, capture_output=True, text=True, timeout=180,
        env=env,
    )  # fmt: skip
