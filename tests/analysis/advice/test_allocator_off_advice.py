"""A run without the caching allocator is told so, not told to use CUDA graphs or torch.compile."""

from __future__ import annotations

from kinetolens import load
from kinetolens.analysis.advice.recommendations import recommendations
from tests.conftest import trace_path

#: ResNet-18 on MI300X with PYTORCH_NO_HIP_MEMORY_CACHING: 1,460 hipMalloc, 88.8% of the step in runtime calls.
NO_POOL = "tracelens/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz"


def test_allocator_off_is_the_advice_and_graphs_stay_silent() -> None:
    found = recommendations(load(trace_path(NO_POOL)))
    first = found[0]
    assert first.rule == "allocator_off"
    assert "PYTORCH_NO_HIP_MEMORY_CACHING" in first.change
    assert 3000 < first.saving_ms < 3392  # the hipMalloc/hipFree time of the 3,391.7 ms step
    assert not {"host_bound", "launch_overhead"} & {f.rule for f in found}
