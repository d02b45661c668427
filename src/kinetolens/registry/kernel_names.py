"""Short, readable kernel names for tables.

A raw CUDA/HIP kernel name is a whole C++ signature: return type,
namespaces, template arguments several levels deep and the argument list,
often 300-800 characters (``void at::native::vectorized_elementwise_kernel<4,
at::native::AddFunctor<float>, std::array<char*, 3ul> >(int, ...)``).  The
short form keeps what tells kernels apart (the kernel, its functor or
lambda's enclosing function, dtypes) and drops the rest:

* ``void``, the argument list, lambda and ``operator()`` plumbing;
* PyTorch's namespaces (``at::native::``, ``(anonymous namespace)::``, ``c10::``,
  ``std::``); library namespaces (``cudnn::``, ``cutlass::``) stay on the kernel;
* PyTorch's vector widths and block sizes (``<4, ...>``), ``Array<char*, 3>``,
  offset calculators and load/store policies;
* template arguments nested more than two levels deep (their names stay),
  and a kernel's trailing ``true``/``false`` switches.

Itanium-mangled names (HIP kernels: ``_ZN5aiter...``) are demangled first
(:mod:`kinetolens.registry.demangle`).  Names without a signature (cuBLAS ``sm90_xmma_gemm_...``, cuDNN
``volta_scudnn_...``, Triton, MIOpen ``igemm_...``) are kept whole, except
Tensile's ``Cijk_...`` names, cut after their macro-tile fields.  Tables
truncate what is still too long in the middle (:func:`kinetolens.views.units.middle`).
"""

from __future__ import annotations

import re
from functools import lru_cache

import polars as pl

from kinetolens.registry.demangle import demangle

#: Namespaces that say nothing about which kernel ran.
_NOISE_NS = re.compile(
    r"\(anonymous namespace\)::|\b(?:at::native::|at::cuda::detail::|at::cuda::|at::detail::|at::|c10::|std::"
    r"|native::|binary_internal::|memory::|detail::)"
)
_CALL = re.compile(r"\w\(")
_PARENS = re.compile(r"\([^()]*\)")
#: nvcc's extended lambdas: ``f(int, ...)::[lambda(int) (instance 58)]``; the instance tells them apart.
_LAMBDA_INSTANCE = re.compile(r"::\[lambda\((?:[^()]|\([^()]*\))*\) \(instance (\d+)\)\]")
_LAMBDA = re.compile(r"(?:::\{lambda#\d+\}|::operator(?: const)?| const\b)+")
_QUALIFIER = re.compile(r"\b[A-Za-z_]\w*::")
#: Template arguments that are plumbing, not what the kernel computes.
_PLUMBING = re.compile(
    r"^(?:-?\d+[uUlL]*$|true$|false$|char\*$|\w*Array\b|array\b|\w*OffsetCalculator\b|LoadWith\w*|StoreWith\w*)"
)
#: Wrappers whose only interesting template argument is the functor inside.
_WRAPPERS = ("gpu_kernel_impl_nocast", "gpu_kernel_impl")
#: Tensile (rocBLAS / hipBLASLt) names: keep up to the macro and matrix-instruction tiles.
_TENSILE = re.compile(r"^(Cijk_\w*?_MT\d+x\d+x\d+(?:_MI\d+x\d+x\d+)?)_")


def _without_return_type(text: str) -> str:
    """The kernel without a return type before it (``enable_if<...>::type kernel<...>`` -> ``kernel<...>``):
    what follows the last space outside template brackets."""
    depth, cut = 0, 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif ch == " " and depth == 0:
            cut = i + 1
    return text[cut:]


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated template arguments of ``text`` (no outer brackets)."""
    args, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    args.append(text[start:].strip())
    return [a for a in args if a]


def _head_and_args(text: str) -> tuple[str, list[str] | None]:
    """``name<a, b<c>>`` -> ``("name", ["a", "b<c>"])``; ``None`` without a template."""
    lt = text.find("<")
    if lt < 0 or not text.endswith(">"):
        return text, None
    return text[:lt].strip(), _split_args(text[lt + 1 : -1])


def _simplify(arg: str, level: int, torch: bool) -> str:
    """One template argument shown to ``level`` more levels, inner namespaces dropped."""
    head, args = _head_and_args(arg)
    head = _QUALIFIER.sub("", head) if level < 2 else head
    if args is None:
        return head
    if head in _WRAPPERS and args:
        return _simplify(args[-1], level, torch)
    if level <= 0:
        return head
    kept = _keep(args, level - 1, torch)
    return f"{head}<{', '.join(kept)}>" if kept else head


def _keep(args: list[str], level: int, torch: bool) -> list[str]:
    out: list[str] = []
    for a in args:
        if torch and _PLUMBING.match(a):
            continue
        s = _simplify(a, level, torch)
        if s and not (torch and s in out):
            out.append(s)
    return out


@lru_cache(maxsize=65536)
def short_kernel_name(name: str) -> str:
    """The readable short form of one kernel name (see the module docstring)."""
    name = demangle(name)  # HIP kernels arrive mangled: _ZN5aiter24add_rmsnorm_quant_kernel...
    if "<" not in name and "::" not in name and not _CALL.search(name):  # not a C++ signature: Memcpy HtoD (...)
        m = _TENSILE.match(name)
        return m.group(1) if m else name
    torch = "at::" in name or "c10::" in name or "(anonymous namespace)" in name
    s = name.strip().removeprefix("void ")
    s = s.replace("(anonymous namespace)::", "")
    s = _LAMBDA_INSTANCE.sub(r"[lambda \1]", s)  # its enclosing function stays: update_halo_kernel[lambda 58]
    while True:  # argument lists, innermost first: lambda signatures, casts, the call itself
        t = _PARENS.sub("", s)
        if t == s:
            break
        s = t
    s = _LAMBDA.sub("", s)
    s = _NOISE_NS.sub("", s)
    s = _without_return_type(re.sub(r"\s*>", ">", s).strip())
    if not s:
        return name
    head, args = _head_and_args(s)
    if args is None:
        return head
    while args and args[-1] in ("true", "false"):  # trailing feature switches (flash attention has seven)
        args.pop()
    kept = _keep(args, 1, torch)
    return f"{head}<{', '.join(kept)}>" if kept else head


def short_names(names: pl.Series) -> pl.Series:
    """:func:`short_kernel_name` of each value, computed once per distinct name."""
    if names.dtype == pl.Null or names.len() == 0:
        return names.cast(pl.String)
    uniq = names.drop_nulls().unique()
    mapping = dict(zip(uniq.to_list(), (short_kernel_name(n) for n in uniq.to_list())))
    return names.replace_strict(mapping, default=None, return_dtype=pl.String)


@lru_cache(maxsize=65536)
def kernel_function(name: str) -> str:
    """The kernel's function, without return type, namespaces, template
    arguments or parameters: what two tools that spell a kernel differently
    agree on.  CUPTI writes ``void at::native::(anonymous
    namespace)::vectorized_layer_norm_kernel<float, float, 0>(int, float, ...)``
    where Nsight Compute writes ``void at::<unnamed>::vectorized_layer_norm_kernel<float,
    float, 0>(int, T2, ...)``; both give ``vectorized_layer_norm_kernel``.
    Names that are not C++ signatures (``nvjet_sm90_...``) come back whole.
    """
    s = demangle(name).strip().replace("(anonymous namespace)", "").replace("<unnamed>", "")
    out: list[str] = []
    depth = 0
    for ch in s:  # drop template arguments, however deep
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    head = "".join(out).split("(", 1)[0].strip()
    return head.rsplit("::", 1)[-1].rsplit(" ", 1)[-1] or name
