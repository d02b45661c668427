"""Which source ops and modules each kernel inductor generates fuses.

A kernel that ``torch.compile`` generates is named after the ATen ops it
fuses (``cpp_fused_add_mul_relu_0``, ``triton_poi_fused_add_mul_0``) and
nothing else: the trace cannot say which ``nn.Module`` those ops came from,
their shapes, or which ops a decomposition (``native_layer_norm`` ->
``var_mean``, ``rsqrt``, ...) turned them into.  Inductor knows all of it
while it writes the kernel: the scheduler nodes it fuses carry their FX
nodes (``origins``), each with its target op, the op it was decomposed from
(``original_aten``), its ``nn_module_stack`` (``fwd_nn_module_stack`` in
the backward graph) and the tensors it was traced with (``meta["val"]``).

:func:`watch` wraps the scheduling classes' ``codegen_comment`` hook, which
every C++ kernel and every Triton kernel passes through with its name and
the nodes it fuses, and records those facts per kernel (the nodes are
described once, as plain data).  ``kinetolens.profile`` writes the record
into each trace's run metadata (``inductor_kernels``); the model reads it
from there (``kinetolens.analysis.hardware.compiled_kernels``).

Code generation is skipped when inductor's FX graph cache (or AOTAutograd's
cache) already holds a graph, so while watching both are turned off: every
graph compiled is lowered again (seconds); the compiled C++ and Triton
binaries stay cached.  C++ kernels are wrapped in profiler ranges
(``cpp.enable_kernel_profile``), so each is named in the trace.
:func:`unwatch` restores the three settings.  Graphs compiled before
:func:`watch` ran are not recorded; their kernels are described from their
names alone.

Inductor's scheduling classes are internal API: any failure here records
nothing and never breaks the compile.
"""

from __future__ import annotations

import re
import sys
from types import ModuleType
from typing import Any

from kinetolens.capture.import_hook import when_imported

#: Profiler name of a generated kernel -> its records (one per graph that
#: generated a kernel of that name; C++ kernels are named per graph already).
KERNELS: dict[str, list[dict[str, Any]]] = {}
#: The run-metadata key the records are written under.
METADATA_KEY = "inductor_kernels"

_WRAPPED = "_kinetolens_provenance"
_ROOT = re.compile(r"^L\['[^']*'\]\.?")
_INDEX = re.compile(r"\[(\d+)\]")
_MODULES_ITEM = re.compile(r"\._modules\['([^']*)'\]")
_GETATTR = re.compile(r"getattr\((.*), '([^']*)'\)")
_saved: dict[str, tuple[Any, str, Any]] = {}
_watching = False


def watch() -> None:
    """Record every kernel inductor generates from now on in this process
    (idempotent).  Imports nothing: hooks run when inductor loads."""
    global _watching
    if _watching:
        return
    _watching = True
    when_imported("torch._inductor.config", _no_graph_cache)
    when_imported("torch._inductor.codegen.cpp", lambda m: _wrap(m, "CppScheduling", "cpp"))
    when_imported("torch._inductor.codegen.triton", lambda m: _wrap(m, "TritonScheduling", "triton"))


def unwatch() -> None:
    """Give inductor its graph caches back (the wrapped hooks stay, idle)."""
    global _watching
    _watching = False
    for owner, attr, value in _saved.values():
        setattr(owner, attr, value)
    _saved.clear()


def recorded() -> dict[str, list[dict[str, Any]]]:
    """What has been recorded so far (plain data, for the run metadata)."""
    return {name: list(records) for name, records in KERNELS.items()}


#: (module, setting, value while watching): the graph caches off (see the
#: module docstring); C++ kernels wrapped in profiler ranges, so each is named
#: in the trace (``kinetolens run`` also sets its environment variable).
_SETTINGS = (
    ("torch._inductor.config", "fx_graph_cache", False),
    ("torch._functorch.config", "enable_autograd_cache", False),
    ("torch._inductor.config", "cpp.enable_kernel_profile", True),
)


def _no_graph_cache(config: ModuleType) -> None:
    if not _watching:
        return
    for module_name, setting, value in _SETTINGS:
        try:
            __import__(module_name)
            owner: Any = sys.modules[module_name]
            *parents, attr = setting.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            key = f"{module_name}:{setting}"
            if key not in _saved:
                _saved[key] = (owner, attr, getattr(owner, attr))
            setattr(owner, attr, value)
        except Exception:  # noqa: BLE001 - a torch without the setting: nothing to change
            continue


def _wrap(module: ModuleType, class_name: str, backend: str) -> None:
    cls = getattr(module, class_name, None)
    hook = cls.__dict__.get("codegen_comment") if isinstance(cls, type) else None  # its own, not inherited
    if cls is None or hook is None or getattr(hook, _WRAPPED, False):
        return

    def codegen_comment(self: Any, node_schedule: Any, kernel_name: Any = None, *args: Any, **kwargs: Any) -> Any:
        if _watching and isinstance(kernel_name, str):
            try:
                _record(node_schedule, kernel_name, backend)
            except Exception:  # noqa: BLE001 - provenance is optional; the compile is not
                pass
        return hook(self, node_schedule, kernel_name, *args, **kwargs)

    setattr(codegen_comment, _WRAPPED, True)
    codegen_comment.__wrapped__ = hook  # type: ignore[attr-defined]
    cls.codegen_comment = codegen_comment


def _record(node_schedule: Any, kernel_name: str, backend: str) -> None:
    from torch._inductor.virtualized import V

    origins: dict[str, Any] = {}
    for snode in node_schedule if isinstance(node_schedule, (list, tuple)) else ():
        node = getattr(snode, "node", None)
        for origin in getattr(node, "origins", None) or ():
            if origin.op == "call_function" and origin.name not in origins:
                origins[origin.name] = origin
    if not origins:
        return
    order = _graph_order(next(iter(origins.values())).graph)
    nodes = sorted(origins.values(), key=lambda n: order.get(n, 0))
    ops = [d for d in (_describe(n) for n in nodes) if d is not None]
    graph_id = getattr(V.graph, "graph_id", None)
    name = f"graph_{graph_id}_{kernel_name}" if backend == "cpp" and graph_id is not None else kernel_name
    record = {"kernel": kernel_name, "backend": backend, "graph": graph_id, "ops": ops}
    records = KERNELS.setdefault(name, [])
    if record not in records:
        records.append(record)


_orders: dict[int, tuple[Any, dict[Any, int]]] = {}


def _graph_order(graph: Any) -> dict[Any, int]:
    """Node -> position in its graph, computed once per graph."""
    key = id(graph)
    hit = _orders.get(key)
    if hit is None or hit[0] is not graph:
        hit = (graph, {n: i for i, n in enumerate(graph.nodes)})
        _orders.clear()  # one graph is lowered at a time
        _orders[key] = hit
    return hit[1]


def op_name(target: Any) -> str | None:
    """``aten.addmm.default`` -> ``aten::addmm``; None for what is not an op (``getitem``)."""
    text = str(target)
    parts = text.split(".")
    if len(parts) < 2 or not parts[0].isidentifier() or "<" in text:
        return None
    return f"{parts[0]}::{parts[1]}"


def module_path(stack: Any) -> tuple[str, str] | None:
    """The innermost entry of an ``nn_module_stack`` as (attribute path inside
    the compiled module, class name); the compiled module itself is ``""``."""
    if not isinstance(stack, dict) or not stack:
        return None
    entry = list(stack.values())[-1]
    if not isinstance(entry, tuple) or len(entry) < 2:
        return None
    path, cls = str(entry[0]), entry[1]
    while True:
        m = _GETATTR.fullmatch(path)
        if m is None:
            break
        path = f"{m[1]}.{m[2]}"
    path = _MODULES_ITEM.sub(r".\1", path)
    path = _INDEX.sub(r".\1", _ROOT.sub("", path))
    name = cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1]
    return path, name


def _arg(value: Any) -> tuple[list[int], str, str]:
    """(shape, dtype, concrete value) of one argument, as Kineto records them."""
    meta = getattr(value, "meta", None)
    if isinstance(meta, dict):
        val = meta.get("val")
        shape = getattr(val, "shape", None)
        if shape is not None:
            try:
                return [int(s) for s in shape], str(val.dtype), ""
            except (TypeError, ValueError):  # symbolic sizes: shape unknown
                return [], str(val.dtype), ""
        return [], "", ""
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return [], "Scalar", str(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value):
        return [], "ScalarList", str(list(value))
    return [], "", ""


def _describe(node: Any) -> dict[str, Any] | None:
    name = op_name(node.target)
    if name is None:
        return None
    meta = node.meta
    backward = "nn_module_stack" not in meta and "fwd_nn_module_stack" in meta
    module = module_path(meta.get("nn_module_stack") or meta.get("fwd_nn_module_stack"))
    original = meta.get("original_aten")
    args = [_arg(a) for a in node.args]
    out: dict[str, Any] = {
        "op": name,
        "node": node.name,
        "of": op_name(original) if original is not None else None,
        "module": module[0] if module else None,
        "module_type": module[1] if module else None,
        "backward": backward,
        "dims": [a[0] for a in args],
        "types": [a[1] for a in args],
        "concrete": [a[2] for a in args],
    }
    trace = meta.get("stack_trace")
    if isinstance(trace, str):
        frames = re.findall(r'File "([^"]+)", line (\d+), in (\w+)', trace)
        if frames:
            path, line, func = frames[-1]
            out["source"] = f"{path.rsplit('/', 1)[-1]}:{line}"
    return out

