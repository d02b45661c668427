"""The parts every FLOP formula shares: parsed arguments, results, registration.

A formula is a small function of one op call's arguments (shapes, dtypes and
the concrete values of non-tensor arguments, as Kineto records them) that
returns the algorithmic FLOPs and the minimum bytes the call must move: each
input read once and each output written once, at its dtype's size.  Output
shapes are not in the trace, so formulas derive them.

Entries carry two facts besides the function that decide *where* the work is
counted (see :mod:`kinetolens.analysis.workload.work`):

* ``family``: what kind of work it is (``gemm``, ``conv``, ``attention`` ...).
* ``composite``: the op is a convenience wrapper (``aten::linear``,
  ``aten::conv2d``, ``aten::layer_norm``) whose real work is done by the ops
  it calls.  A composite defers to its descendants when one of them has a
  formula of a family in ``defers_to`` (any family when that is None), and
  counts itself only when none does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgspec

from kinetolens.registry.dtypes import DTYPE_BYTES, canonical, promote

Shape = tuple[int, ...]
_decode = msgspec.json.Decoder()


@dataclass(frozen=True)
class Work:
    """FLOPs and minimum bytes of one op call; ``formula`` says how they were counted."""

    flops: float
    bytes: float | None
    formula: str


class Tensor:
    """One tensor argument: its shape and canonical dtype (None when unknown)."""

    __slots__ = ("dtype", "shape")

    def __init__(self, shape: Shape, dtype: str | None) -> None:
        self.shape = shape
        self.dtype = dtype

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> float | None:
        return DTYPE_BYTES[self.dtype] if self.dtype else None

    @property
    def nbytes(self) -> float | None:
        size = self.itemsize
        return None if size is None else self.numel * size

    def __repr__(self) -> str:
        return f"Tensor({list(self.shape)}, {self.dtype})"


@dataclass(frozen=True)
class BatchStats:
    """The sequences an inference engine's step ran, from its step annotation.

    Per phase (prefill/"context" and decode/"generation"): the number of
    sequences and the sums over them of new query tokens ``sq``, key tokens
    ``sk`` (cached prefix + new), ``sq*sq`` and ``sq*sk``.  Attention over
    paged / variable-length batches needs these: the tensors hold only the
    batch's tokens, not how they split into sequences.
    """

    context_seqs: int
    context_sq: int
    context_sk: int
    context_sqsq: int
    context_sqsk: int
    decode_seqs: int
    decode_sq: int
    decode_sk: int
    decode_sqsk: int


@dataclass
class OpArgs:
    """One op call's arguments, decoded from the ``ops`` table's JSON text.

    ``fwd`` is the forward op's arguments for ops that run in backward, so a
    backward formula can use shapes its own call did not record; ``bwd``,
    for forward ops, the first backward op linked to them (its autograd
    node), whose incoming gradient has the forward's output shape;
    ``batch``, for ops that need it (``needs_batch``), the sequences of the
    engine step the call ran in; ``below``, for ops whose own arguments do not
    fix their work (``needs_below``), the arguments of the ops they call.
    """

    name: str
    dims: list
    types: list
    concrete: list
    fwd: OpArgs | None = None
    bwd: OpArgs | None = None
    batch: BatchStats | None = None
    below: list[OpArgs] | None = None

    @classmethod
    def parse(
        cls, name: str, dims: str | None, types: str | None, concrete: str | None, fwd: OpArgs | None = None,
        bwd: OpArgs | None = None,
    ) -> OpArgs:  # fmt: skip
        return cls(name, json_list(dims), json_list(types), json_list(concrete), fwd, bwd)

    def __len__(self) -> int:
        return len(self.dims)

    def type_at(self, i: int) -> str:
        return str(self.types[i]) if i < len(self.types) and self.types[i] is not None else ""

    def tensor(self, i: int) -> Tensor | None:
        """Argument ``i`` as a tensor, or None if it is absent or not a tensor."""
        if i >= len(self.dims):
            return None
        dims = self.dims[i]
        dtype = canonical(self.type_at(i))
        if dtype is None or not isinstance(dims, list) or any(not isinstance(d, int) for d in dims):
            return None
        return Tensor(tuple(dims), dtype)

    def tensors(self) -> list[Tensor]:
        return [t for t in (self.tensor(i) for i in range(len(self.dims))) if t is not None]

    def tensor_list(self, i: int) -> list[Tensor] | None:
        """Argument ``i`` as a list of tensors (``TensorList``); dtypes are not recorded."""
        if i >= len(self.dims):
            return None
        dims = self.dims[i]
        if not isinstance(dims, list) or not dims or not all(isinstance(d, list) for d in dims):
            return None
        if not all(isinstance(x, int) for d in dims for x in d):
            return None
        return [Tensor(tuple(d), None) for d in dims]

    def value(self, i: int) -> object:
        """The concrete value of argument ``i`` (int, float, bool, list, str) or None."""
        if i >= len(self.concrete):
            return None
        text = self.concrete[i]
        if not isinstance(text, str) or text == "":
            return text if text not in ("", None) else None
        if text in ("True", "False"):
            return text == "True"
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            pass
        if text.startswith("["):
            try:
                return _decode.decode(text.replace("True", "true").replace("False", "false"))
            except msgspec.DecodeError:
                return text
        return text

    def int_list(self, i: int, n: int | None = None) -> list[int] | None:
        """A concrete int list argument (a bare int is repeated ``n`` times)."""
        v = self.value(i)
        if isinstance(v, bool):
            return None
        if isinstance(v, int) and n is not None:
            return [v] * n
        if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return list(v)
        return None

    def flag(self, i: int, default: bool = False) -> bool:
        v = self.value(i)
        return v if isinstance(v, bool) else default


def json_list(text: str | None) -> list:
    """A JSON-text column value (shapes, dtypes, concrete inputs) as a list;
    empty when absent or not a list, so formulas see no arguments rather
    than a guess."""
    if not text:
        return []
    try:
        out = _decode.decode(text)
    except msgspec.DecodeError:
        return []
    return out if isinstance(out, list) else []


# -- helpers formulas share ---------------------------------------------------


def broadcast(shapes: Iterable[Shape]) -> Shape | None:
    """The broadcast shape of several shapes, or None if they do not broadcast."""
    out: list[int] = []
    for shape in shapes:
        shape = tuple(shape)
        if len(shape) > len(out):
            out = [1] * (len(shape) - len(out)) + out
        pad = (1,) * (len(out) - len(shape)) + shape
        for k, (a, b) in enumerate(zip(out, pad)):
            if a == b or b == 1:
                continue
            if a == 1:
                out[k] = b
            else:
                return None
    return tuple(out)


def result_dtype(tensors: list[Tensor]) -> str | None:
    """The dtype an arithmetic op returns; 0-dim tensors do not promote, as in torch."""
    dimensioned = [t.dtype for t in tensors if t.shape and t.dtype]
    pool = dimensioned or [t.dtype for t in tensors if t.dtype]
    if not pool:
        return None
    out = pool[0]
    for d in pool[1:]:
        out = promote(out, d)
    return out


def size_of(numel: int, dtype: str | None) -> float | None:
    return None if dtype is None else numel * DTYPE_BYTES[dtype]


def total(*parts: float | None) -> float | None:
    """Sum of byte counts; unknown if any part is unknown."""
    if any(p is None for p in parts):
        return None
    return float(sum(parts))  # type: ignore[arg-type]


# -- registration ---------------------------------------------------------------

Formula = Callable[[OpArgs], Work | None]


@dataclass(frozen=True)
class Entry:
    name: str
    fn: Formula
    family: str
    composite: bool = False
    defers_to: frozenset[str] | None = None
    needs_forward: bool = False
    needs_backward: bool = False
    needs_batch: bool = False
    needs_below: bool = False
    #: The dtype the op computes in, where its first tensor argument's is not
    #: (an ``out`` argument first, FP4 stored as ``uint8``).
    precision: Callable[[OpArgs], str | None] | None = None


REGISTRY: dict[str, Entry] = {}


def register(
    names: str | Iterable[str],
    family: str,
    *,
    composite: bool = False,
    defers_to: Iterable[str] | None = None,
    needs_forward: bool = False,
    needs_backward: bool = False,
    needs_batch: bool = False,
    needs_below: bool = False,
    precision: Callable[[OpArgs], str | None] | None = None,
) -> Callable[[Formula], Formula]:
    """Register ``fn`` for op names (``aten::`` is added where missing).

    A name registered twice is an error (as in ``torch.utils.flop_counter``):
    the second formula would silently replace the first.
    """
    names = [names] if isinstance(names, str) else list(names)
    defer = frozenset(defers_to) if defers_to is not None else None

    def deco(fn: Formula) -> Formula:
        for n in names:
            full = n if "::" in n else f"aten::{n}"
            if full in REGISTRY:
                raise ValueError(f"{full} has a FLOP formula already ({REGISTRY[full].fn.__qualname__}); not registering {fn.__qualname__}")
            REGISTRY[full] = Entry(
                full, fn, family, composite, defer, needs_forward, needs_backward, needs_batch, needs_below,
                precision,
            )
        return fn

    return deco
