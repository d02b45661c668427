"""Kernel-name rules cost bounded work per name, and keep real names' verdicts.

A corrupt or hostile trace can hold a multi-megabyte kernel name; searching
the whole name with every rule took minutes.  The rules now see at most a
bounded head and tail of a name, so a name's cost is bounded while every
real kernel name (all under the bound) is classified exactly as before.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest

from kinetolens.registry import tensor_cores
from kinetolens.registry.tensor_cores import RULES, UNKNOWN, YES, classify

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
WITH_KERNELS = [
    "tracelens/inference/xdit_flux.1/capture_traces/capture_trace_rank_0.json.gz",
    "tracelens/perf_model/normalization/normalization_layer_test.json.gz",
    "hta/trace_filter/sampled_rank-0.json.gz",
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz",
]
MIB8 = 8 << 20


def full_search(name: str) -> tuple[str, str]:
    """The rules applied to the whole name (the unbounded reference)."""
    for rule in RULES:
        if rule.pattern.search(name):
            return rule.verdict, rule.reason
    return UNKNOWN, "no rule matches the name"


def kernel_names(rel: str) -> set[str]:
    events = json.loads(gzip.decompress((TRACES / rel).read_bytes()))["traceEvents"]
    return {e["name"] for e in events if e.get("cat") == "kernel" and isinstance(e.get("name"), str)}


@pytest.mark.parametrize("rel", WITH_KERNELS)
def test_real_kernel_names_keep_their_verdicts(rel: str) -> None:
    names = kernel_names(rel)
    assert names
    assert max(map(len, names)) <= 16384
    for name in names:
        assert classify(name) == full_search(name), name


@pytest.mark.parametrize(
    "name",
    [
        "_gemm_" * (MIB8 // 6),  # the end-anchored GEMM rule backtracks at every "_gemm_"
        "a" * MIB8,
        "xmma_" * (MIB8 // 5),
        "void at::native::elementwise_kernel<128, 4>(int, " * (MIB8 // 48),
    ],
    ids=["gemm-repeated", "one-letter", "xmma-repeated", "template-repeated"],
)
def test_an_8_mib_name_is_classified_in_bounded_time(name: str) -> None:
    tensor_cores.classify.cache_clear()
    start = time.perf_counter()
    classify(name)
    assert time.perf_counter() - start < 2.0


def test_a_huge_name_keeps_the_verdict_its_head_and_tail_give() -> None:
    head = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_64x3_nn"
    assert classify(head + "x" * MIB8) == (YES, full_search(head)[1])
    assert classify("x" * MIB8 + "_nvjet_tst_64x8")[0] == YES
