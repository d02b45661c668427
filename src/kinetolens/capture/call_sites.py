"""The exact line of user code that led to each op, written into the trace.

torch names each ``python_function`` event by the line where its function
was *entered*, so from the exported trace alone an op inside ``forward``
maps to the ``def`` line and module-level code to the line where profiling
started.  torch's Python tracer does record more than it exports: for every
call of a Python or C function, the line its caller was executing.  When a
window's trace is written, :func:`write_call_stacks` walks torch's event
tree once and gives each op a Kineto ``Call stack`` arg (the field torch < 2
wrote, which kinetolens and TensorBoard's plugin read): the user frames
above the op, innermost first, each at the line that made the call toward
the op.  Nothing is added to a step; the cost is at export.

An op that Python code runs without calling a function, such as ``h * 2``
(``Tensor.__mul__``, a C type slot), leaves no call event, so no line.
While a capture records stacks, :func:`record_operator_lines` gives
``torch.Tensor`` the C-implemented operators as one-line Python methods
(``return TensorBase.__mul__(self, other)``), and the properties that run
an op (``.T``, ``.mT``...) Python properties: each becomes a call whose
caller line torch records, at the cost of one Python call per use (about
1 us under the profiler), nothing per other op (bench/capture_overhead.py).
An op whose line is still not recorded (a trace from bare torch.profiler)
is shown as its enclosing function, ``in forward (file:line)``, never as a
line it was not run at.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kinetolens.user_code import is_user_file

#: An op's or annotation's event as torch's export writes it, up to the
#: first arg, which is always its ``External id`` (= the op's correlation
#: id in the event tree).  Group 1 ends where the stack is inserted.
_OP_EVENT = re.compile(rb'("cat": "(?:cpu_op|user_annotation)",[^{}]*?"args": \{\s*"External id": (\d+),)')
_STACK_ARG = b'"Call stack"'


def op_call_stacks(event_tree: list[Any]) -> dict[int, str]:
    """Correlation id -> ``Call stack`` for each op with a recorded call line.

    ``event_tree``: ``kineto_results.experimental_event_tree()``.  Walked
    once, without recursion (Python stacks nest deeply).  Along each path,
    ``frames`` are the user frames known at their call line and ``exact``
    says whether the innermost user frame is among them.  A user function
    whose body is a single line (``def f(x): return g(x)``) calls at its
    entry line and is shown as its function, which is true too.
    """
    from torch._C._profiler import _EventType

    py_call, c_call, torch_op, leaf = _EventType.PyCall, _EventType.PyCCall, _EventType.TorchOp, _EventType.Allocation
    user: dict[str, bool] = {}

    def is_user(path: str) -> bool:
        known = user.get(path)
        if known is None:
            known = user[path] = is_user_file(path)
        return known

    stacks: dict[int, str] = {}
    joined: dict[tuple[str, ...], str] = {}
    # (event, frames, exact, entry line of the Python frame running it (None at a root))
    todo: list[tuple[Any, tuple[str, ...], bool, int | None]] = [(r, (), False, None) for r in reversed(event_tree)]
    while todo:
        event, frames, exact, entry = todo.pop()
        tag = event.tag
        if tag == torch_op:
            if exact and frames:
                text = joined.get(frames)
                if text is None:
                    text = joined[frames] = ";".join(frames)
                stacks[event.correlation_id] = text
        elif tag == leaf:  # allocator events (profile_memory): a third of the tree
            continue
        elif tag == py_call or tag == c_call:
            fields = event.extra_fields
            caller = fields.caller
            # A call "made" at the line its caller was entered at is no
            # call line: a root frame's caller is itself, and code that
            # torch.compile rewrote reports its def line for every call.
            line = caller.line_number
            if entry is not None and line != entry and is_user(caller.file_name):
                frames = (f"{caller.file_name}({line}): {caller.function_name}", *frames)
                exact = True
            if tag == py_call:
                entry = fields.callsite.line_number
                if is_user(fields.callsite.file_name):
                    exact = False  # inside a user function: its lines are not recorded
        children = event.children
        if children:
            todo.extend([(child, frames, exact, entry) for child in children[::-1]])
    return stacks


#: Tensor operators torch implements in C (on ``torch._C.TensorBase``), run
#: through type slots with no call event.  Those ``torch.Tensor`` defines in
#: Python (``__rsub__``, ``__pow__``, ``__neg__``, ``__iter__``...) are
#: recorded calls already.
OPERATORS = (
    "__add__", "__radd__", "__iadd__", "__sub__", "__isub__", "__mul__", "__rmul__", "__imul__",
    "__truediv__", "__matmul__", "__mod__", "__imod__", "__ifloordiv__", "__and__", "__rand__", "__iand__",
    "__or__", "__ror__", "__ior__", "__xor__", "__rxor__", "__ixor__", "__lshift__", "__ilshift__",
    "__rshift__", "__irshift__", "__invert__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
    "__getitem__", "__setitem__", "__delitem__", "__bool__", "__float__", "__int__", "__index__", "__complex__",
)  # fmt: skip
#: ``TensorBase`` properties whose getter runs an op (``x.T`` is ``aten::numpy_T``).
PROPERTIES = ("T", "mT", "H", "mH", "real", "imag")


def _as_call(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` behind a Python function named ``name`` (the name torch
    gives the frame in the trace)."""

    def operator(self: Any, *args: Any) -> Any:
        return method(self, *args)

    operator.__code__ = operator.__code__.replace(co_name=name)
    operator.__name__ = operator.__qualname__ = name
    return operator


def _as_property(name: str, descriptor: Any) -> property:
    """``descriptor`` (a C getset) as a property whose getter is a Python
    call named ``name``; setting goes to the descriptor unchanged."""
    get = _as_call(name, descriptor.__get__)

    def set_(self: Any, value: Any) -> None:
        descriptor.__set__(self, value)

    return property(get, set_, doc=descriptor.__doc__)


def record_operator_lines() -> Callable[[], None]:
    """Make ``torch.Tensor``'s C operators Python calls (see the module
    docstring); returns the function that undoes it.  Affects every thread
    while installed; an operator the program itself replaced meanwhile is
    left as the program set it."""
    import torch

    tensor, base = torch.Tensor, vars(torch._C.TensorBase)
    installed: dict[str, Any] = {
        name: _as_call(name, base[name]) for name in OPERATORS if name in base and name not in vars(tensor)
    }
    installed.update(
        (name, _as_property(name, base[name])) for name in PROPERTIES if name in base and name not in vars(tensor)
    )
    for name, call in installed.items():
        setattr(tensor, name, call)

    def undo() -> None:
        for name, call in installed.items():
            if vars(tensor).get(name) is call:
                delattr(tensor, name)

    return undo


def insert_call_stacks(trace: bytes, stacks: dict[int, str]) -> bytes:
    """``trace`` (torch's chrome export) with ``stacks`` as ``Call stack``
    args of its ops; unchanged when torch wrote stacks itself."""
    if not stacks or _STACK_ARG in trace:
        return trace
    encoded = {cid: b'"Call stack": ' + json.dumps(text).encode() + b", " for cid, text in stacks.items()}

    def add(match: re.Match[bytes]) -> bytes:
        arg = encoded.get(int(match[2]))
        return match[1] if arg is None else match[1] + arg

    return _OP_EVENT.sub(add, trace)


def write_call_stacks(json_path: Path, prof: Any) -> None:
    """Add the call stacks of ``prof``'s last window (a stopped
    ``torch.profiler.profile``) to its exported trace at ``json_path``."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is None:
        return
    try:
        stacks = op_call_stacks(results.experimental_event_tree())
    except (AttributeError, ImportError, RuntimeError, TypeError) as exc:
        # torch's event tree is an experimental API: a torch that changed it
        # still gets its trace, with enclosing functions as sources.
        warnings.warn(f"kinetolens.profile: ops' call lines not recorded ({exc})", RuntimeWarning, stacklevel=2)
        return
    if stacks:
        json_path.write_bytes(insert_call_stacks(json_path.read_bytes(), stacks))
