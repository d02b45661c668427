"""An inference trace's figures in words: its token rate, what its
iterations are, and the summary's rows about them (read from the typed
inference block alone, so a summary read back from the cache needs no
tables to say them)."""

from __future__ import annotations

from kinetolens.analysis.inference.block import InferenceBlock
from kinetolens.views import units


def token_rate(value: float | None) -> str:
    """Tokens per second as a person reads it: ``26.6k``, ``308``."""
    if value is None:
        return "-"
    for scale, prefix in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{units.sig(value / scale, 3)}{prefix}"
    return units.sig(value, 3)


def iterations_title(block: InferenceBlock) -> str:
    """``Engine iterations``, or ``Model forwards`` for a program that is no LLM engine's."""
    return "Model forwards" if block.model_forwards else "Engine iterations"


def iterations_sentence(block: InferenceBlock) -> str:
    """What the iterations are and how they were labelled, in one paragraph (report and dashboard)."""
    n = len(block.iterations)
    evidence = ", ".join(block.evidence)
    if block.model_forwards:
        return (
            f"An inference trace ({evidence}) with no engine annotation and no decode step: {n:,} model "
            f"forward{'s' if n != 1 else ''}, each a call of a root nn.Module and labelled by its module (no prefill "
            "or decode). A forward's time is its host range extended to the end of the GPU work it launched."
        )
    return (
        f"An inference trace ({evidence}): {n:,} engine iteration{'s' if n != 1 else ''}, each labelled prefill, "
        "decode or mixed from what the trace says. An iteration's time is its host range extended to the end "
        "of the GPU work it launched; tokens/s are its tokens over that time."
    )


def inference_rows(block: InferenceBlock) -> list[tuple[str, str]]:
    """``what, value`` rows for a summary's inference block (none for a trace
    that is not inference): the evidence, the iterations per phase and the tokens."""
    if not block.detected:
        return []
    rows = [("inference", "yes: " + ", ".join(block.evidence))]
    its = block.iterations
    if not its:
        rows.append(("iterations", "none found (no engine annotation, no decode from shapes): steps shown"))
        return rows
    counts = ", ".join(f"{p.phase} {p.iterations}" for p in block.phases)
    rows.append(("iterations", f"{len(its):,} ({counts})"))
    if block.tokens is not None:
        rate = f", {token_rate(block.tokens_per_s)} tok/s" if block.tokens_per_s is not None else ""
        rows.append(("tokens", f"{block.tokens:,} in {units.duration(block.tokens_time_us)}{rate}"))
    return rows
