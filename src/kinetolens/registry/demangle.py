"""A bounded Itanium C++ demangler for kernel names (``_ZN5aiter24add_rmsnorm...``).

HIP kernels (aiter, composable_kernel, sglang) reach the trace mangled.  A
table needs the kernel's qualified name and its template arguments, not the
parameter list, so this reads the common forms only: nested and unscoped
names, template arguments (types, literals, packs, substitutions, template
parameters), pointers, references and qualifiers.  What it does not know
(expressions, function types) becomes ``…`` and ends that argument list; a
name it cannot read at all is returned unchanged.  No runtime dependency
(c++filt is not on every machine, and fails on ``DF16b`` anyway).
"""

from __future__ import annotations

from functools import lru_cache

#: Builtin type codes (``DF16b``: LLVM's ``__bf16``).
_BUILTIN = {
    "v": "void", "w": "wchar_t", "b": "bool", "c": "char", "a": "signed char", "h": "unsigned char", "s": "short",
    "t": "unsigned short", "i": "int", "j": "unsigned int", "l": "long", "m": "unsigned long", "x": "long long",
    "y": "unsigned long long", "n": "__int128", "o": "unsigned __int128", "f": "float", "d": "double",
    "e": "long double", "g": "__float128", "z": "...",
}  # fmt: skip
_BUILTIN_D = {"DF16b": "bfloat16", "DF16_": "_Float16", "Dh": "half", "Dn": "nullptr_t", "Di": "char32_t", "Ds": "char16_t"}
#: Recursion and length bounds: kernel names nest deep, but not without end.
MAX_DEPTH = 64


class _Unknown(Exception):
    """A production this demangler does not read."""


class _Reader:
    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0
        self.subs: list[str] = []
        self.params: list[str] = []  # the function's template arguments (T_, T0_, ...)
        self.depth = 0

    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def take(self, token: str) -> bool:
        if self.s.startswith(token, self.i):
            self.i += len(token)
            return True
        return False

    def number(self) -> int:
        start = self.i
        while self.i < len(self.s) and self.s[self.i].isdigit():
            self.i += 1
        if start == self.i:
            raise _Unknown(self.s[self.i :])
        return int(self.s[start : self.i])

    def seq_id(self, end: str = "_") -> int:
        """``_`` -> 0, ``<base 36>_`` -> value + 1 (substitutions and template parameters)."""
        start = self.i
        while self.i < len(self.s) and self.s[self.i] != end:
            self.i += 1
        digits = self.s[start : self.i]
        self.i += 1
        return int(digits, 36) + 1 if digits else 0

    def source_name(self) -> str:
        n = self.number()
        name = self.s[self.i : self.i + n]
        self.i += n
        return "(anonymous namespace)" if name.startswith("_GLOBAL__N") else name

    def substitution(self) -> str:
        if self.take("St"):
            return "std"
        self.take("S")
        k = self.seq_id()
        if k >= len(self.subs):
            raise _Unknown("substitution")
        return self.subs[k]

    def template_param(self) -> str:
        self.take("T")
        k = self.seq_id()
        return self.params[k] if k < len(self.params) else f"T{k}"

    def template_args(self) -> list[str]:
        self.take("I")
        args: list[str] = []
        while not self.take("E"):
            args.append(self.template_arg())
        return args

    def template_arg(self) -> str:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Unknown("depth")
        try:
            if self.take("L"):
                return self.literal()
            if self.take("J"):  # a pack
                parts: list[str] = []
                while not self.take("E"):
                    parts.append(self.template_arg())
                return ", ".join(p for p in parts if p)
            if self.peek() == "X":
                raise _Unknown("expression")
            return self.type()
        finally:
            self.depth -= 1

    def literal(self) -> str:
        if self.take("_Z"):
            raise _Unknown("external name")
        kind = self.type()
        start = self.i
        while self.i < len(self.s) and self.s[self.i] != "E":
            self.i += 1
        value = self.s[start : self.i].replace("n", "-", 1) if self.s[start : start + 1] == "n" else self.s[start : self.i]
        self.take("E")
        if kind == "bool":
            return "true" if value == "1" else "false"
        return value if kind in ("int", "long", "unsigned int", "unsigned long") else f"({kind}){value}"

    def type(self) -> str:
        for code, name in _BUILTIN_D.items():
            if self.take(code):
                return name
        c = self.peek()
        if not c:
            raise _Unknown("end")
        if c in _BUILTIN:
            self.i += 1
            return _BUILTIN[c]
        if c in "PROKV":
            self.i += 1
            inner = self.type()
            out = {"P": f"{inner}*", "R": f"{inner}&", "O": f"{inner}&&", "K": f"{inner} const", "V": f"{inner} volatile"}[c]
            self.subs.append(out)
            return out
        if c == "T":
            out = self.template_param()
            if self.peek() == "I":
                self.subs.append(out)
                out += f"<{', '.join(self.template_args())}>"
            self.subs.append(out)
            return out
        if c == "S":
            out = self.substitution()
            if self.peek() == "I":
                out += f"<{', '.join(self.template_args())}>"
                self.subs.append(out)
            return out
        if c == "N":
            return self.nested(function=False)
        if c.isdigit():
            out = self.source_name()
            self.subs.append(out)
            if self.peek() == "I":
                out += f"<{', '.join(self.template_args())}>"
                self.subs.append(out)
            return out
        raise _Unknown(self.s[self.i :])

    def nested(self, function: bool) -> str:
        """``N [K|V|r] prefix... E``; each prefix is a substitution candidate, the function's own name is not."""
        self.take("N")
        while self.peek() in ("K", "V", "r") and self.peek():
            self.i += 1
        name = ""
        while not self.take("E"):
            c = self.peek()
            if not c:
                raise _Unknown("end")
            if c == "I":
                args = self.template_args()
                if function and self.peek() == "E":
                    self.params = args
                name += f"<{', '.join(args)}>"
            elif c == "S":
                name = self.substitution()
                continue
            elif c == "T":
                name = self.template_param()
            elif c.isdigit():
                part = self.source_name()
                name = f"{name}::{part}" if name else part
            else:
                raise _Unknown(self.s[self.i :])
            if not (function and self.peek() == "E"):
                self.subs.append(name)
        return name

    def encoding(self) -> str:
        if not self.take("_Z"):
            raise _Unknown("not mangled")
        if self.peek() == "N":
            return self.nested(function=True)
        if self.take("St"):
            name = "std::" + self.source_name()
        else:
            name = self.source_name()
        if self.peek() == "I":
            self.subs.append(name)
            args = self.template_args()
            self.params = args
            name += f"<{', '.join(args)}>"
        return name


@lru_cache(maxsize=16384)
def demangle(name: str) -> str:
    """``name`` demangled to its qualified name and template arguments (no
    parameter list); an argument it cannot read is ``…``; ``name`` itself
    when it is not an Itanium name or cannot be read."""
    if not name.startswith("_Z"):
        return name
    reader = _Reader(name)
    try:
        return reader.encoding()
    except (_Unknown, ValueError, IndexError, RecursionError):
        return _partial(name)


def _partial(name: str) -> str:
    """The qualified name alone, with ``<…>`` where its template arguments could not be read."""
    reader = _Reader(name)
    reader.take("_Z")
    reader.take("N")
    parts: list[str] = []
    try:
        while reader.peek().isdigit():
            parts.append(reader.source_name())
    except (_Unknown, ValueError):
        return name
    if not parts:
        return name
    return "::".join(parts) + ("<…>" if reader.peek() == "I" else "")
