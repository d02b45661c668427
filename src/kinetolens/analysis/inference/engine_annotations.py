"""The iteration annotations inference engines write, read into counts.

vLLM, SGLang and ATOM wrap each engine iteration (one scheduler step: one
forward over the batch) in a ``record_function`` range whose name carries
the batch: how many requests are in prefill (vLLM: *context*, SGLang:
*EXTEND*) and in decode (*generation*, *DECODE*), and how many tokens each
group feeds the model.  Those numbers label an iteration without guessing.

Formats read (examples from real traces):

* vLLM, detailed: ``execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)``:
  8192 tokens; 9 prefill requests feeding 8155 query tokens (``sq``) over
  8430 key tokens (``sk``); 37 decode requests, 37 tokens.
* vLLM: ``execute_context_1(888_788544)_generation_0(0)`` (the first
  number in each parenthesis is the group's tokens) and the older
  ``execute_new_2_cached_30`` (new and running requests, no token counts).
* SGLang: ``step[EXTEND bs=15 toks=15360]``, ``step[DECODE bs=64]``,
  ``step[MIXED bs=2 c=1 g=1 c_sq=5 g_sq=1]``.
* ATOM: ``prefill[bs=2 tok=14721 ...]``, ``decode[bs=64 tok=64 ...]``.
* vLLM V1's ``gpu_model_runner: forward`` range: one iteration, no counts
  (its shapes label it).

Only names are read here: where the ranges are and what else the trace
says about them is :mod:`kinetolens.analysis.inference.phases`' concern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A name that may be an iteration annotation (a cheap first filter for polars).
CANDIDATE = r"^(execute_|step\[|prefill\[|decode\[|gpu_model_runner: forward$)"
#: vLLM V1's forward range: one a step, with no counts (shapes label it).
VLLM_FORWARD = "gpu_model_runner: forward"

_VLLM_DETAILED = re.compile(
    r"^execute_(\d+)_context_(\d+)\(sq(\d+)sk(\d+)sqsq\d+sqsk\d+\)_generation_(\d+)\(sq(\d+)sk(\d+)sqsq\d+sqsk\d+\)"
)
_VLLM = re.compile(r"^execute_context_(\d+)\((\d+)[^)]*\)_generation_(\d+)\((\d+)[^)]*\)")
_VLLM_OLD = re.compile(r"^execute_new_(\d+)_cached_(\d+)")
_SGLANG = re.compile(r"^step\[(EXTEND|DECODE|MIXED|PREFILL)\b([^\]]*)\]")
_ATOM = re.compile(r"^(prefill|decode)\[([^\]]*)")
_KEY = re.compile(r"(\w+)=(\d+)")


@dataclass(frozen=True)
class IterationCounts:
    """What an engine's annotation says about one iteration.

    Counts are None where the format does not carry them.  ``phase`` is
    set where the format names it (SGLang's mode, ATOM's prefix);
    otherwise it follows from the request counts (:func:`phase_of`).
    """

    engine: str
    prefill_requests: int | None = None
    decode_requests: int | None = None
    prefill_tokens: int | None = None
    decode_tokens: int | None = None
    tokens: int | None = None
    requests: int | None = None
    phase: str | None = None
    #: How the label follows from the name, in words.
    basis: str = ""


def phase_of(prefill: int | None, decode: int | None) -> str | None:
    """``prefill``, ``decode`` or ``mixed`` from request (or token) counts; None when both are unknown or zero."""
    p, d = prefill or 0, decode or 0
    if p and d:
        return "mixed"
    if p:
        return "prefill"
    if d:
        return "decode"
    return None


def _n(count: int, word: str) -> str:
    """``1 token``, ``8,155 tokens``."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _sum(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _vllm(name: str) -> IterationCounts | None:
    m = _VLLM_DETAILED.match(name)
    if m:
        tokens, pre, pre_tok, _, dec, dec_tok, _ = (int(x) for x in m.groups())
    else:
        m = _VLLM.match(name)
        if not m:
            return _vllm_old(name)
        pre, pre_tok, dec, dec_tok = (int(x) for x in m.groups())
        tokens = pre_tok + dec_tok
    phase = phase_of(pre, dec)
    return IterationCounts(
        "vLLM", pre, dec, pre_tok, dec_tok, tokens, pre + dec, phase,
        f"vLLM execute_: {_n(pre, 'prefill request')} ({_n(pre_tok, 'token')}), {dec} decode ({_n(dec_tok, 'token')})",
    )  # fmt: skip


def _vllm_old(name: str) -> IterationCounts | None:
    m = _VLLM_OLD.match(name)
    if not m:
        return None
    new, cached = int(m.group(1)), int(m.group(2))
    # A running ("cached") request is decoding, or continuing a chunked
    # prefill: the name cannot tell, so the basis says so.
    return IterationCounts(
        "vLLM", new, cached, None, None, None, new + cached, phase_of(new, cached),
        f"vLLM execute_new_: {_n(new, 'new request')} (prefill), {cached} running (decode, or a chunked prefill going on)",
    )  # fmt: skip


def _sglang(name: str) -> IterationCounts | None:
    m = _SGLANG.match(name)
    if not m:
        return None
    mode, body = m.group(1), m.group(2)
    kv = {k: int(v) for k, v in _KEY.findall(body)}
    bs, toks = kv.get("bs"), kv.get("toks")
    c_sq, g_sq = kv.get("c_sq"), kv.get("g_sq")
    if mode == "DECODE":
        dec_tok = g_sq if g_sq is not None else toks if toks is not None else bs
        counts = dict(prefill_requests=0, decode_requests=bs, prefill_tokens=0, decode_tokens=dec_tok, tokens=dec_tok)
        phase = "decode"
    elif mode == "MIXED":
        c, g = kv.get("c"), kv.get("g")
        counts = dict(prefill_requests=c, decode_requests=g, prefill_tokens=c_sq, decode_tokens=g_sq,
                      tokens=_sum(c_sq, g_sq) if c_sq is not None or g_sq is not None else toks)  # fmt: skip
        phase = "mixed"
    else:  # EXTEND: prefill, possibly over a cached prefix
        pre_tok = c_sq if c_sq is not None else toks
        counts = dict(prefill_requests=bs, decode_requests=0, prefill_tokens=pre_tok, decode_tokens=0, tokens=pre_tok)
        phase = "prefill"
    said = ", ".join(f"{k}={v:,}" for k, v in kv.items() if k in ("bs", "toks", "c", "g", "c_sq", "g_sq"))
    return IterationCounts("SGLang", **counts, requests=bs, phase=phase, basis=f"SGLang step[{mode}]: {said}")


def _atom(name: str) -> IterationCounts | None:
    m = _ATOM.match(name)
    if not m:
        return None
    phase, body = m.group(1), m.group(2)
    bs = re.search(r"\bbs=(\d+)", body)
    tok = re.search(r"\btok=(\d+)", body)
    requests = int(bs.group(1)) if bs else None  # bs=117/128: the real batch before CUDA-graph padding
    tokens = int(tok.group(1)) if tok else None
    pre = phase == "prefill"
    return IterationCounts(
        "ATOM", requests if pre else 0, 0 if pre else requests, tokens if pre else 0, 0 if pre else tokens,
        tokens, requests, phase, f"ATOM {phase}[]: bs={requests}, tok={tokens}",
    )  # fmt: skip


def parse(name: str) -> IterationCounts | None:
    """The counts an engine iteration annotation carries, or None for any other name."""
    if name.startswith("execute_"):
        return _vllm(name)
    if name == VLLM_FORWARD:
        return IterationCounts("vLLM", basis=f"vLLM {VLLM_FORWARD} range (no counts)")
    if name.startswith("step["):
        return _sglang(name)
    return _atom(name)
