"""A GPU listed by one index whose kernels ran on another reads as one GPU."""

from __future__ import annotations

from kinetolens.views.device_words import unlisted_devices_note
from tests.conftest import trace_path
from tests.terminal import cli_text


def test_the_listing_and_the_kernels_device_are_tied_in_words() -> None:
    # xDiT on an MI300X: deviceProperties lists id 0, the kernels ran on device 2
    out = " ".join(cli_text("summary", str(trace_path("tracelens/inference/xdit_flux.1/capture_traces/capture_trace_rank_0.json.gz")), "--no-cache", columns=100).split())
    assert "AMD Instinct MI300X (id 0); its kernels ran on device 2" in out
    assert unlisted_devices_note([0], [2]) == "its kernels ran on device 2"
    assert unlisted_devices_note([0, 1], [4, 5]) == "its kernels ran on devices 4, 5"


def test_nothing_is_said_where_the_indices_agree() -> None:
    out = cli_text("summary", str(trace_path("kineto/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz")), "--no-cache", columns=120)
    assert "its kernels ran on" not in out
    assert unlisted_devices_note([0], [0]) is None and unlisted_devices_note([0], []) is None

