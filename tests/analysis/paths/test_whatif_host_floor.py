"""A what-if that reaches the step's host floor says so.

On Qwen's step, GEMMs twice as fast or removed both predict the same step:
the host, not the GPU, then bounds it, and the prediction must say that
faster kernels cannot shorten it further (else 0.5 and 0 read as a measurement
that happens to agree).
"""

from __future__ import annotations

import pytest

import kinetolens
from kinetolens.analysis.paths.whatif import parse_change, whatif
from tests.conftest import trace_path
from tests.terminal import cli_text

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
FLOOR = "the step is bound by host work: faster kernels cannot shorten it below 32.8 ms"


def test_host_floor_is_the_changes_at_zero() -> None:
    trace = kinetolens.load(trace_path(QWEN))
    half = whatif(trace, [parse_change("kernel:gemm=0.5")])
    gone = whatif(trace, [parse_change("kernel:gemm=0")])
    assert half.predicted_us == pytest.approx(gone.predicted_us, abs=1.0)
    assert half.host_floor_us == pytest.approx(gone.predicted_us, abs=1.0)
    assert half.at_host_floor
    assert not whatif(trace, [parse_change("kernel:gemm=0.9")]).at_host_floor


def _flat(*args: str, columns: int) -> str:
    return " ".join(cli_text(*args, columns=columns).split())


@pytest.mark.parametrize("columns", [80, 120])
def test_whatif_says_when_the_host_bounds_the_step(columns: int) -> None:
    assert FLOOR in _flat("whatif", str(trace_path(QWEN)), "-c", "kernel:gemm=0.5", columns=columns)
    assert "bound by host work" not in _flat("whatif", str(trace_path(QWEN)), "-c", "kernel:gemm=0.9", columns=columns)
