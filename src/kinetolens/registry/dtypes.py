"""Element sizes of tensor dtypes, as the profiler spells them.

Kineto writes C++ type names (``float``, ``c10::Half``, ``long int``),
torch-side tools write Python names (``torch.float16``, ``bf16``); both map
to one canonical name and its size in bytes.  A name missing here is not a
tensor dtype (``Scalar``, ``ScalarList``, ``TensorList``, ``Int``, ...) or is
one we do not know, and byte counts that need it stay unknown rather than
guessed.
"""

from __future__ import annotations

#: canonical dtype name -> bytes per element
DTYPE_BYTES: dict[str, float] = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,  # stored as fp32; only the math is narrower
    "fp16": 2,
    "bf16": 2,
    "fp8": 1,
    "fp4": 0.5,
    "fp4x2": 1,  # torch's float4_e2m1fn_x2: two FP4 values per element of the shape
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "complex128": 16,
    "complex64": 8,
    "complex32": 4,
}

#: every spelling seen in traces -> canonical name
ALIASES: dict[str, str] = {
    # Kineto (C++ type names)
    "double": "fp64",
    "float": "fp32",
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
    "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
    "c10::Float8_e8m0fnu": "fp8",
    "c10::Float4_e2m1fn_x2": "fp4x2",
    "long int": "int64",
    "long": "int64",
    "int64_t": "int64",
    "int": "int32",
    "short int": "int16",
    "short": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::complex<double>": "complex128",
    "c10::complex<float>": "complex64",
    "c10::complex<c10::Half>": "complex32",
    # torch / short names
    "torch.float64": "fp64",
    "torch.float32": "fp32",
    "torch.float16": "fp16",
    "torch.bfloat16": "bf16",
    "torch.float8_e4m3fn": "fp8",
    "torch.float8_e5m2": "fp8",
    "torch.int64": "int64",
    "torch.int32": "int32",
    "torch.int16": "int16",
    "torch.int8": "int8",
    "torch.uint8": "uint8",
    "torch.bool": "bool",
    "float64": "fp64",
    "float32": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
}
ALIASES.update({name: name for name in DTYPE_BYTES})

#: c10::ScalarType codes, as concrete ``dtype=`` arguments are recorded
SCALAR_TYPE_CODES: dict[int, str] = {
    0: "uint8",
    1: "int8",
    2: "int16",
    3: "int32",
    4: "int64",
    5: "fp16",
    6: "fp32",
    7: "fp64",
    8: "complex32",
    9: "complex64",
    10: "complex128",
    11: "bool",
    15: "bf16",
    23: "fp8",
    24: "fp8",
    25: "fp8",
    26: "fp8",
    44: "fp8",  # float8_e8m0fnu (MX block scales)
    45: "fp4x2",
}

_FLOAT_RANK = {"fp4x2": 0, "fp8": 1, "fp16": 2, "bf16": 2, "fp32": 3, "tf32": 3, "fp64": 4}


def canonical(name: str | None) -> str | None:
    """The canonical dtype for a spelling, or None when it is not a tensor dtype."""
    if not name:
        return None
    return ALIASES.get(name.strip())


def dtype_bytes(name: str | None) -> float | None:
    """Bytes per element of a dtype spelling; None where unknown."""
    canon = canonical(name)
    return DTYPE_BYTES[canon] if canon else None


def is_floating(name: str | None) -> bool:
    return canonical(name) in _FLOAT_RANK


def promote(a: str, b: str) -> str:
    """The result dtype of an arithmetic op on two canonical dtypes (simplified).

    Floating beats integer beats bool; a wider float wins; fp16 with bf16
    gives fp32, as torch does.
    """
    if a == b:
        return a
    fa, fb = a in _FLOAT_RANK, b in _FLOAT_RANK
    if fa != fb:
        return a if fa else b
    if fa:
        ra, rb = _FLOAT_RANK[a], _FLOAT_RANK[b]
        if ra == rb:
            return "fp32"
        return a if ra > rb else b
    if a == "bool" or b == "bool":
        return b if a == "bool" else a
    return a if DTYPE_BYTES[a] >= DTYPE_BYTES[b] else b
