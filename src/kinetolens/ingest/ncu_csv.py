"""Nsight Compute's per-kernel metrics, from its raw CSV page.

``ncu --import step.ncu-rep --csv --page raw --print-units base > step.csv``
(or ``ncu --csv --page raw ...`` while profiling) writes one row per
profiled kernel, in launch order: ``ID``, the process, ``Kernel Name``,
``Context``, ``Stream``, ``Block Size`` and ``Grid Size`` as ``(x, y, z)``,
``Device``, ``CC``, then one column per metric (``dram__bytes_read.sum``,
``smsp__sass_thread_inst_executed_op_ffma_pred_on.sum``,
``sm__ops_path_tensor_src_bf16_dst_fp32.sum`` ...).  The second row gives
each metric's unit.  Numbers carry thousands separators (``1,861.33``).

Without ``--print-units base`` ncu scales units to the value (``Kbyte``,
``usecond``); they are brought back to bytes, nanoseconds, hertz and plain
counts here, so a metric always means the same unit.  Device attributes
(``device__attribute_*``), the launch configuration (``launch__*`` but
registers, shared memory and waves per SM) and the profiler's own
bookkeeping are dropped,
as are the ``.min``/``.max`` (and duplicate ``.avg``) rollups ncu adds
beside each ``.sum`` asked for: across a kernel's SMs they say nothing the
sum does not.

Output: :class:`NcuKernels`, a frame with ``ncu_id, pid, kernel, device,
stream, grid_x, grid_y, grid_z, block_x, block_y, block_z`` and one Float64
column per metric.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from kinetolens.errors import TraceError, TraceWarning
from kinetolens.ingest.opener import open_trace_bytes

#: How a user makes the file this reader takes.
EXPORT_HINT = "export it with: ncu --import REPORT.ncu-rep --csv --page raw --print-units base > REPORT.csv"

#: The numbered columns before the metrics, as ncu names them (and ``Kernel Name``).
_FIXED = {"ID": "ncu_id", "Process ID": "pid", "Device": "device", "Stream": "stream"}
_KERNEL = "Kernel Name"
_DIMS = {"Grid Size": "grid", "Block Size": "block"}
#: Columns that describe the machine, the profiler or the launch configuration
#: (the grid and block are read apart), not what the kernel did; of the
#: launch, the registers, shared memory and waves per SM stay.
_NOT_KERNEL = re.compile(
    r"^(device__attribute_|nvlink__|numa__|c2clink__|profiler__|pmsampling:|(?:sm|smsp)__maximum_"
    r"|launch__(?!registers_per_thread$|shared_mem_per_block$|waves_per_multiprocessor$))"
)
_ROLLUP = re.compile(r"^(?P<base>[^.]+)\.(?P<rollup>sum|avg|min|max)(?P<rest>\..+)?$")

#: Scaled units ncu prints without ``--print-units base``: factor to the base unit.
_PREFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TIME = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9, "ns": 1.0, "us": 1e3, "ms": 1e6}
_BASE_UNITS = ("byte", "inst", "cycle", "hz", "warp", "block", "thread", "sector", "request", "register")


def unit_factor(unit: str) -> float:
    """Factor taking a value in ``unit`` to its base unit (nanoseconds for time)."""
    head, _, per = unit.partition("/")
    if head in _TIME:
        return _TIME[head]
    if len(head) > 1 and head[0] in _PREFIX and head[1:].lower() in _BASE_UNITS:
        return _PREFIX[head[0]]
    return 1.0


def _kept_metrics(columns: list[str]) -> list[str]:
    """The metric columns worth keeping, in the file's order (see the module docstring)."""
    names = set(columns)
    kept = []
    for c in columns:
        if "__" not in c or _NOT_KERNEL.match(c):
            continue
        m = _ROLLUP.match(c)
        if m is not None:
            base, rollup, rest = m["base"], m["rollup"], m["rest"] or ""
            if rollup in ("min", "max"):
                continue
            if rollup == "avg" and not rest and f"{base}.sum" in names:
                continue
            if rollup == "sum" and rest and f"{base}.avg{rest}" in names:
                continue
        kept.append(c)
    return kept


@dataclass(frozen=True)
class NcuKernels:
    """The profiled kernels of one Nsight Compute CSV, in launch order."""

    path: str
    frame: pl.DataFrame
    metrics: list[str]
    warnings: list[TraceWarning] = field(default_factory=list)


def _numbers(col: pl.Expr) -> pl.Expr:
    """``"1,861.33"`` -> 1861.33; anything else (``n/a``, words) -> null."""
    return col.str.replace_all(",", "", literal=True).str.strip_chars().cast(pl.Float64, strict=False)


def _text(data: bytes, path: Path) -> str:
    """The CSV text from its first header line on: lines ncu prints while
    profiling (``==PROF== ...``) may come first where its stdout was kept."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TraceError(path, f"not an Nsight Compute CSV (binary data; an .ncu-rep report? {EXPORT_HINT})") from None
    start = text.find('"ID"')
    if start < 0 or f'"{_KERNEL}"' not in text[start : start + 4096]:
        raise TraceError(path, f"not an Nsight Compute raw CSV (no ID and Kernel Name columns; {EXPORT_HINT})")
    return text[start:]


def read_ncu_csv(path: str | Path) -> NcuKernels:
    """The kernels and metrics of an Nsight Compute raw-page CSV (``.csv`` or ``.csv.gz``)."""
    p = Path(path)
    opened = open_trace_bytes(p)
    text = _text(bytes(opened.data), p)
    warnings: list[TraceWarning] = []
    if not text.endswith("\n") and "\n" in text:  # a file cut short: its last row is incomplete
        text = text[: text.rfind("\n") + 1]
        warnings.append(TraceWarning("Nsight Compute rows cut off", 1, "the file ends inside a row; that row is left out"))
    try:
        raw = pl.read_csv(io.StringIO(text), infer_schema=False, truncate_ragged_lines=True)
    except pl.exceptions.PolarsError as exc:
        raise TraceError(p, f"unreadable Nsight Compute CSV ({str(exc).splitlines()[0]})") from None
    missing = [c for c in (*_FIXED, _KERNEL, *_DIMS) if c not in raw.columns]
    if missing:
        raise TraceError(p, f"Nsight Compute CSV without the column(s) {', '.join(missing)}; {EXPORT_HINT}")
    units: dict[str, str] = {}
    if raw.height and not (raw["ID"][0] or "").strip():  # the units row
        units = {c: (raw[c][0] or "").strip() for c in raw.columns}
        raw = raw.slice(1)
    ids = _numbers(pl.col("ID"))
    bad = raw.filter(ids.is_null()).height
    raw = raw.filter(ids.is_not_null())
    if raw.height == 0:
        raise TraceError(p, "Nsight Compute CSV without a profiled kernel")
    repeated = raw.height - raw.select(ids.n_unique()).item()
    if repeated:
        raise TraceError(p, f"Nsight Compute CSV repeating {repeated} kernel IDs (several reports in one file?): "
                            "pair one report at a time")
    metrics = _kept_metrics(raw.columns)
    dims = []
    for column, prefix in _DIMS.items():
        parts = pl.col(column).str.strip_chars("() ").str.split(",")
        dims += [parts.list.get(i, null_on_oob=True).str.strip_chars().cast(pl.Int64, strict=False).alias(f"{prefix}_{axis}")
                 for i, axis in enumerate("xyz")]
    frame = raw.select(
        *(_numbers(pl.col(column)).cast(pl.Int64).alias(name) for column, name in _FIXED.items()),
        pl.col(_KERNEL).alias("kernel"),
        *dims,
        *((_numbers(pl.col(m)) * unit_factor(units.get(m, ""))).alias(m) for m in metrics),
    )
    # A metric that is never a number (an enum such as launch__func_cache_config) is no counter.
    numeric = [m for m in metrics if frame[m].null_count() < frame.height]
    frame = frame.drop(sorted(set(metrics) - set(numeric)))
    if bad:
        warnings.append(TraceWarning("Nsight Compute rows skipped", bad, "rows without a kernel ID"))
    return NcuKernels(str(p), frame.sort("ncu_id"), numeric, warnings)
