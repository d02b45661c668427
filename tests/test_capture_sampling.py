"""kinetolens.profile(sample_rate=N): memory sampled every N ops, with real torch on the CPU."""

from __future__ import annotations

import gzip
import json
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
