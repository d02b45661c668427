"""The package's import structure: one direction of flow and no cycles.

Read from the source with ``ast`` (function-level imports included, imports
only for type checkers left out), so a late ``import`` inside a function
cannot hide an upward edge or a cycle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: Modules every layer may use: facts as data (registry), the error types,
#: the names kinetolens writes into files, the one JSON encoder, and the package's lazy front door.
FOUNDATION = {"registry", "errors", "formats", "json_codec", "user_code", "_allocator", "_lazy", ""}
#: The layers, lowest first: a module may import its own layer, a lower one
#: and the foundation, never a higher layer.
LAYERS = ["capture", "ingest", "model", "load", "analysis", "runs", "views", "cli"]
#: Top-level modules that belong to a layer.
TOP_LEVEL = {"__main__": "cli", "cache": "load", "loader": "load", "derived": "load", "sources": "load", "windowed": "load", "logdir": "load", "fingerprint": "load", "memory_room": "load"}
#: Only these layers may import capture (it needs torch; the analyzer must not).
CAPTURE_USERS = {"capture", "cli"}
#: Within analysis/, each folder (or top-level module) may use those listed before it.
ANALYSIS_ORDER = [
    "forest", "trace_kind_type", "session", "gputime", "workload", "memory", "hardware", "inference", "trace_kind", "finding", "ranks", "paths",
    "advice", "diff_levels", "diff_environment", "diff_sums", "diff", "summary_types", "attribution_shares", "summary", "summary_windows", "report_windows", "invariants",
]  # fmt: skip


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "kinetolens").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_lines(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    if target in modules and target != name:
                        edges[name].add(target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules and alias.name != name:
                        edges[name].add(alias.name)
    return edges


MODULES = _modules()
EDGES = _edges(MODULES)


def _layer(module: str) -> str:
    parts = module.split(".")
    first = parts[1] if len(parts) > 1 else ""
    return TOP_LEVEL.get(first, first)


def _analysis_folder(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 3 or parts[1] != "analysis":
        return None
    return parts[2]  # analysis/<folder>/... or analysis/<module>.py


def test_every_module_has_a_known_layer():
    unknown = sorted(m for m in MODULES if _layer(m) not in LAYERS and _layer(m) not in FOUNDATION)
    assert not unknown, f"modules outside every layer (add them to LAYERS or TOP_LEVEL): {unknown}"


def test_imports_go_down_the_layers_only():
    upward = []
    for source, targets in EDGES.items():
        src_layer = _layer(source)
        for target in targets:
            dst_layer = _layer(target)
            if dst_layer in FOUNDATION and src_layer != "registry":
                continue
            if src_layer == "registry":
                if dst_layer not in {"registry", "errors"}:
                    upward.append(f"{source} -> {target} (registry imports no other layer)")
                continue
            if src_layer in FOUNDATION:
                if dst_layer not in FOUNDATION:
                    upward.append(f"{source} -> {target} (foundation modules import no layer)")
                continue
            if dst_layer == "capture" and src_layer not in CAPTURE_USERS:
                upward.append(f"{source} -> {target} (only the CLI may use capture)")
            elif LAYERS.index(dst_layer) > LAYERS.index(src_layer):
                upward.append(f"{source} -> {target} ({src_layer} may not import {dst_layer})")
    assert not upward, "upward imports:\n" + "\n".join(sorted(upward))


def test_analysis_folders_form_a_dag():
    unplaced = sorted({f for m in MODULES if (f := _analysis_folder(m)) is not None and f not in ANALYSIS_ORDER})
    assert not unplaced, f"analysis folders or modules missing from ANALYSIS_ORDER: {unplaced}"
    wrong = []
    for source, targets in EDGES.items():
        a = _analysis_folder(source)
        if a is None:
            continue
        for target in targets:
            b = _analysis_folder(target)
            if b is None or a == b:
                continue
            if ANALYSIS_ORDER.index(b) > ANALYSIS_ORDER.index(a):
                wrong.append(f"{source} -> {target}")
    assert not wrong, "analysis folders imported against their order:\n" + "\n".join(sorted(wrong))


def _cycles(edges: dict[str, set[str]], nodes: list[str]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    cycles = _cycles(EDGES, list(MODULES))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize(
    "edges, expected",
    [({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]), ({"a": {"b"}, "b": {"c"}}, [])],
)
def test_cycle_finder_finds_cycles(edges, expected):
    assert _cycles(edges, ["a", "b", "c"]) == expected


#: What an analysis may take from ingest: record types and category names, never a reader.
ANALYSIS_FROM_INGEST = {"kinetolens.ingest.flight_recorder": {"Entry", "RankDump"}, "kinetolens.ingest.categories": None}
#: Calls that read or write files.
FILE_CALLS = {"open", "read_bytes", "read_text", "write_bytes", "write_text", "listdir", "scandir", "glob", "rglob", "iterdir"}


def test_analyses_never_read_files():
    # An analysis is a pure function of the trace model: a file (a GPU spec, a
    # dump) is read by ingest, called from the CLI, and its contents passed in.
    found = []
    for name, path in MODULES.items():
        if _layer(name) != "analysis":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
                if called in FILE_CALLS:
                    found.append(f"{name}:{node.lineno} calls {called}()")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kinetolens.ingest"):
                allowed = ANALYSIS_FROM_INGEST.get(node.module or "", set())
                names = {a.name for a in node.names}
                if node.module not in ANALYSIS_FROM_INGEST or (allowed is not None and not names <= allowed):
                    found.append(f"{name}:{node.lineno} imports {sorted(names)} from {node.module}")
    assert not found, "analyses that read files or use a reader:\n" + "\n".join(found)
