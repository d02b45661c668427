"""``kinetolens.nvtx``: NVTX markers for profiling under Nsight Systems.

Under ``nsys profile`` there is no Kineto trace: what ties a kernel to the
model is the NVTX range open on the CPU thread that launched it.  torch's
``emit_nvtx`` names each op's range and adds autograd sequence numbers (to
pair backward ops with their forward op); PyProf added what those ranges lack
to attribute a kernel: the module, the argument shapes and dtypes, and the
line of user code.  This mode pushes, for every aten op while active, one
range whose message is ``kinetolens `` followed by compact JSON::

    kinetolens {"op":"aten::addmm","module":"net.fc1","shapes":[[16],[8,32],[32,16]],
                "dtypes":["float32","float32","float32"],"site":"/src/train.py:41"}

plus one ``kinetolens.module net.fc1`` range around each module's forward,
on top of ``emit_nvtx(record_shapes=True)`` ranges.

Where NVTX is missing (a CPU-only torch build) entering warns once and
emits nothing, so the same script runs everywhere; ``keep_markers=True``
still builds the markers and keeps them in ``markers`` to inspect.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from kinetolens.formats import NVTX_MODULE_PREFIX as MODULE_PREFIX
from kinetolens.formats import NVTX_OP_PREFIX as MARKER_PREFIX


def nvtx_unavailable_reason() -> str | None:
    """Why NVTX ranges cannot be emitted here, or None."""
    import torch

    if not hasattr(torch._C, "_nvtx"):
        return f"this torch build ({torch.__version__}) has no NVTX (no CUDA support)"
    return None


def _shape_and_dtype(value: Any) -> tuple[Any, Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return list(value.shape), str(value.dtype).removeprefix("torch.")
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        pairs = [_shape_and_dtype(v) for v in value]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    return None, None


def describe_args(args: Iterable[Any]) -> tuple[list[Any], list[Any]]:
    """Shapes and dtypes of positional arguments: a tensor's shape and dtype
    name, a list per tensor list, None for anything else (as PyProf did, the
    position of each argument is kept)."""
    shapes: list[Any] = []
    dtypes: list[Any] = []
    for value in args:
        shape, dtype = _shape_and_dtype(value)
        shapes.append(shape)
        dtypes.append(dtype)
    return shapes, dtypes


def format_marker(op: str, module: str | None, shapes: list[Any], dtypes: list[Any], site: str | None) -> str:
    """The message of one op's NVTX range (see the module docstring)."""
    body = {"op": op, "module": module, "shapes": shapes, "dtypes": dtypes, "site": site}
    return MARKER_PREFIX + json.dumps(body, separators=(",", ":"))


def parse_marker(message: str) -> dict[str, Any] | None:
    """A marker back as a dict, or None for any other NVTX message."""
    if not message.startswith(MARKER_PREFIX):
        return None
    data = json.loads(message[len(MARKER_PREFIX) :])
    return data if isinstance(data, dict) else None


def _library_dirs() -> tuple[str, ...]:
    import torch

    here = os.path.dirname(os.path.abspath(__file__))
    return (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, here + os.sep)


def call_site(frame: FrameType | None, skip_dirs: tuple[str, ...]) -> str | None:
    """``file:line`` of the innermost frame outside torch and kinetolens."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(skip_dirs) and not filename.startswith("<"):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


class _ModulePaths:
    """Tracks the dotted path of the module whose forward is running, per
    thread, from global forward hooks.  A child's name is looked up in its
    parent's ``_modules`` once and cached."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._names: dict[tuple[int, int], str] = {}

    def stack(self) -> list[tuple[Any, str]]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def current(self) -> str | None:
        stack = self.stack()
        return stack[-1][1] if stack else None

    def enter(self, module: Any) -> str:
        stack = self.stack()
        if stack:
            parent, parent_path = stack[-1]
            key = (id(parent), id(module))
            name = self._names.get(key)
            if name is None or parent._modules.get(name) is not module:  # ids are reused
                name = next((n for n, m in parent._modules.items() if m is module), type(module).__name__)
                self._names[key] = name
            path = f"{parent_path}.{name}"
        else:
            path = type(module).__name__
        stack.append((module, path))
        return path

    def leave(self, module: Any) -> None:
        stack = self.stack()
        # Unwind to the module (a forward that raised skips its post hook).
        while stack:
            if stack.pop()[0] is module:
                break


class Nvtx:
    """The ``kinetolens.nvtx`` context manager (see the module docstring)."""

    def __init__(self, *, with_modules: bool = True, with_stack: bool = True, keep_markers: bool = False) -> None:
        self.with_modules = with_modules
        self.with_stack = with_stack
        self.keep_markers = keep_markers
        #: Op markers built while active (only with ``keep_markers``).
        self.markers: list[str] = []
        #: Why nothing reaches NVTX, or None when ranges are emitted.
        self.unavailable: str | None = None
        self._exits: list[Callable[[], None]] = []
        self._push: Callable[[str], Any] = _noop
        self._pop: Callable[[], Any] = _noop0

    def __enter__(self) -> Nvtx:
        import torch

        if self._exits:
            raise RuntimeError("kinetolens.nvtx: already active")
        self.unavailable = nvtx_unavailable_reason()
        if self.unavailable is not None:
            warnings.warn(f"kinetolens.nvtx: no NVTX ranges: {self.unavailable}", RuntimeWarning, stacklevel=2)
            if not self.keep_markers:
                return self
        else:
            self._push = torch.cuda.nvtx.range_push
            self._pop = torch.cuda.nvtx.range_pop
            emit = torch.autograd.profiler.emit_nvtx(record_shapes=True)
            emit.__enter__()
            self._exits.append(lambda: emit.__exit__(None, None, None))
        paths = _ModulePaths()
        if self.with_modules:
            self._install_module_hooks(paths)
        mode = _op_marker_mode(self, paths)
        mode.__enter__()
        self._exits.append(lambda: mode.__exit__(None, None, None))
        return self

    def _install_module_hooks(self, paths: _ModulePaths) -> None:
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        push, pop = self._push, self._pop

        def pre(module: Any, _args: Any) -> None:
            push(MODULE_PREFIX + paths.enter(module))

        def post(module: Any, _args: Any, _out: Any) -> None:
            paths.leave(module)
            pop()

        # always_call: a forward that raises still leaves its module (and range).
        handles = [register_module_forward_pre_hook(pre), register_module_forward_hook(post, always_call=True)]

        def remove() -> None:
            for handle in handles:
                handle.remove()

        self._exits.append(remove)

    def __exit__(self, *exc: object) -> None:
        exits, self._exits = self._exits, []
        for undo in reversed(exits):
            undo()
        self._push, self._pop = _noop, _noop0


def _noop(_message: str) -> None:
    return None


def _noop0() -> None:
    return None


def _op_marker_mode(owner: Nvtx, paths: _ModulePaths) -> Any:
    """A TorchDispatchMode that wraps every aten op in a marker range."""
    from torch.utils._python_dispatch import TorchDispatchMode

    skip_dirs = _library_dirs()
    keep = owner.markers if owner.keep_markers else None
    push, pop = owner._push, owner._pop
    with_stack = owner.with_stack

    class OpMarkers(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            shapes, dtypes = describe_args(args)
            site = call_site(sys._getframe(1), skip_dirs) if with_stack else None
            marker = format_marker(func._schema.name, paths.current(), shapes, dtypes, site)
            if keep is not None:
                keep.append(marker)
            push(marker)
            try:
                return func(*args, **(kwargs or {}))
            finally:
                pop()

    return OpMarkers()


def nvtx(*, with_modules: bool = True, with_stack: bool = True, keep_markers: bool = False) -> Nvtx:
    """NVTX ranges per op (name, module path, shapes, dtypes, call site) and
    per module, for ``nsys profile``; see :mod:`kinetolens.capture.nvtx`."""
    return Nvtx(with_modules=with_modules, with_stack=with_stack, keep_markers=keep_markers)
