"""A device name gets its own product's spec or none, never a neighbour's.

"NVIDIA GH200 480GB" matched the H200
pattern and was held to the H200's 4.8 TB/s; it has 4.0 (HBM3) or 4.9
(HBM3e) TB/s.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kinetolens.cli.main import cli, main
from kinetolens.loader import load
from kinetolens.registry.gpus import SPECS, match_device
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from tests.conftest import trace_path

GIB = 1 << 30
QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@pytest.mark.parametrize(
    ("name", "memory", "spec"),
    [
        # the Grace Hopper GPU by its memory (HBM3 96 GB / HBM3e 144 GB) ...
        ("NVIDIA GH200 480GB", 95 * GIB, "GH200-96GB"),
        ("NVIDIA GH200 144G HBM3e", 143 * GIB, "GH200-144GB"),
        # ... and no spec when the memory size cannot tell the two apart.
        ("NVIDIA GH200 480GB", None, None),
        ("NVIDIA H200", 141 * GIB, "H200"),
        ("NVIDIA H200 NVL", 141 * GIB, "H200-NVL"),  # lower clocks than the SXM part
        ("NVIDIA RTX A1000 Laptop GPU", 4 * GIB, None),  # not an A100
        ("NVIDIA GB200", 186 * GIB, "GB200"),
        ("NVIDIA B200", 180 * GIB, "B200"),
        ("NVIDIA GeForce RTX 2080", 8 * GIB, None),  # not the Ti: fewer SMs, less bandwidth
        ("NVIDIA GB300", 279 * GIB, None),  # its rack's per-GPU figures are not in the table
    ],
)
def test_device_name_matches_its_own_product(name: str, memory: int | None, spec: str | None) -> None:
    s = match_device(name, memory)
    assert (s.name if s else None) == spec


def test_gh200_specs_are_its_own() -> None:
    # NVIDIA GH200 datasheet; H100-class compute, its own memory.
    small, large = SPECS["GH200-96GB"], SPECS["GH200-144GB"]
    assert (small.dram_gbps, large.dram_gbps) == (4000.0, 4900.0)
    assert small.tflops["bf16"] == large.tflops["bf16"] == SPECS["H100-SXM"].tflops["bf16"]
    assert SPECS["H200"].dram_gbps == 4800.0


def _renamed(tmp_path: Path, name: str, memory: int | None) -> Path:
    """The Qwen H100 trace with its device renamed (and its memory size changed or dropped)."""
    with gzip.open(trace_path(QWEN), "rt") as f:
        doc = json.load(f)
    for dev in doc["deviceProperties"]:
        dev["name"] = name
        if memory is None:
            dev.pop("totalGlobalMem", None)
        else:
            dev["totalGlobalMem"] = memory
    out = tmp_path / "gh200.json"
    out.write_text(json.dumps(doc))
    return out


def test_gh200_trace_gets_the_gh200_roof(tmp_path: Path) -> None:
    # end to end, through the trace's deviceProperties.
    path = _renamed(tmp_path, "NVIDIA GH200 480GB", 102_005_473_280)  # 95 GiB: the HBM3 part
    spec = gpu_spec(load(str(path), cache=False))
    assert spec is not None and spec.name == "GH200-96GB" and spec.dram_gbps == 4000.0
    result = CliRunner().invoke(cli, ["roofline", str(path), "--no-cache", "-w", "200"])
    assert result.exit_code == 0, result.output
    assert "GH200-96GB (table): DRAM 4,000 GB/s" in result.output.replace("\xa0", " ")  # units keep to their number


def test_gh200_without_memory_size_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # no guess between the 4.0 and 4.9 TB/s parts.
    path = _renamed(tmp_path, "NVIDIA GH200 480GB", None)
    assert gpu_spec(load(str(path), cache=False)) is None
    with pytest.raises(SystemExit) as exit_info:
        main(["roofline", str(path), "--no-cache"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown GPU 'NVIDIA GH200 480GB'" in err and len(err.strip().splitlines()) == 1


def test_a_gpu_spec_given_twice_is_an_error() -> None:
    # as with FLOP formulas,
    # a second entry of one name must not silently replace the first.
    from kinetolens.registry import gpus

    with pytest.raises(ValueError, match="H200"):
        gpus._table(SPECS["H200"], SPECS["H100-SXM"], SPECS["H200"])
