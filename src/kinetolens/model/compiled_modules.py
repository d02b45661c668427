"""The nn.Module of each kernel ``torch.compile`` generated.

The profiler puts a generated kernel's op (a C++ kernel's range, a Triton
launch) in the module that was compiled: all of a compiled model's time
lands on its root.  The capture records, for each generated kernel, the
module path of every FX node it fuses (attribute path inside the compiled
module, ``""`` for the compiled module itself; the run metadata's
``inductor_kernels``).  A kernel belongs to the deepest module common to
all its nodes: nodes of ``block.lin`` and ``block`` make it ``block``'s,
nodes of ``head`` and ``block`` the compiled module's own.  That path is
joined to the op's module (the compiled root) with ``.``, so
``OptimizedModule_0.Net_0`` + ``block.lin`` reads
``OptimizedModule_0.Net_0.block.lin``: compiled submodules are named by
attribute, as the compiled graph knows them (it has no instance numbers).
Nodes without a module stack say nothing; a kernel none of whose nodes has
one keeps the op's module.

Done once in the model (when the loader attaches the run metadata), so every view by module (``modules``, ``ops --by
module``, the report's module tree) splits compiled time the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import polars as pl

from kinetolens.formats import RUN_METADATA_KEY
from kinetolens.model.trace import Trace

#: The run-metadata key the capture writes (``capture.inductor_provenance.METADATA_KEY``).
METADATA_KEY = "inductor_kernels"
SEP = "."


def common_module(paths: Iterable[str]) -> str | None:
    """The deepest dotted path that starts every one of ``paths`` (``""``: only
    the compiled module itself); None when there are no paths."""
    common: list[str] | None = None
    for path in paths:
        parts = path.split(SEP) if path else []
        if common is None:
            common = parts
            continue
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    return None if common is None else SEP.join(common)


def kernel_modules(metadata: dict[str, Any]) -> dict[str, str]:
    """Profiler name of each recorded generated kernel -> its module path
    inside the compiled module (kernels whose nodes name no module left out)."""
    run = metadata.get(RUN_METADATA_KEY)
    kernels = run.get(METADATA_KEY) if isinstance(run, dict) else None
    if not isinstance(kernels, dict):
        return {}
    out = {}
    for name, records in kernels.items():
        nodes = [n for r in records or [] if isinstance(r, dict) for n in r.get("ops") or [] if isinstance(n, dict)]
        common = common_module(n["module"] for n in nodes if isinstance(n.get("module"), str))
        if common is not None:
            out[str(name)] = common
    return out


def join_module(root: str | None, inner: str) -> str | None:
    """``root`` + ``.`` + ``inner`` (either alone when the other is empty)."""
    if not inner:
        return root
    return f"{root}{SEP}{inner}" if root else inner


def compiled_root(module: str | None, inner: str) -> str | None:
    """The compiled module of a kernel the model put in ``module``, its
    fused nodes' common path being ``inner`` (:func:`join_module` undone)."""
    if not inner or module is None:
        return module
    if module == inner:
        return None
    return module.removesuffix(SEP + inner)


def attribute_generated(trace: Trace) -> Trace:
    """``trace`` with each generated kernel's op, and the kernels it
    launches, moved into its fused nodes' common module (module docstring);
    ``trace`` itself when nothing moves.  A step of the loader's pipeline,
    run on every load once the run metadata is attached: that lives beside
    the trace file, not in the cached model.  An op already moved stays."""
    inner = kernel_modules(trace.metadata)
    ops = trace.ops
    if not inner or not ops.height:
        return trace
    hit = ops.select("op_id", "name", "module").with_row_index("row").filter(pl.col("name").is_in(list(inner)))
    moved = [
        root if root is not None and inner[name] and root.endswith(SEP + inner[name]) else join_module(root, inner[name])
        for name, root in zip(hit["name"], hit["module"], strict=True)
    ]
    if not hit.height or moved == hit["module"].to_list():
        return trace
    moved_s = pl.Series("module", moved, dtype=pl.String)
    by_op = hit.select("op_id").with_columns(new_module=moved_s)
    k = trace.kernels
    new = k.select("op_id").join(by_op, on="op_id", how="left", maintain_order="left")["new_module"]
    return dataclasses.replace(
        trace,
        ops=ops.with_columns(ops["module"].scatter(hit["row"], moved_s)),
        kernels=k.with_columns(pl.coalesce(new, pl.col("module")).alias("module")),
    )
