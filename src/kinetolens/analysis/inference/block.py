"""The typed ``inference`` block of the summary: an inference trace's engine
iterations, one aggregate per phase, and its tokens (docs/inference.md).

Built by :func:`kinetolens.analysis.inference.phases.inference_block`; the
terminal, the report and the dashboard lay these fields out, never
recomputing them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kinetolens.analysis.gputime.step_times import StepTimes

#: The ``source`` of iterations that are the model forwards of an inference
#: program that is no LLM engine's (a diffusion pipeline): no prefill or decode.
COMPONENT_SOURCE = "forward: root nn.Module call"


@dataclass(frozen=True, kw_only=True)
class Iteration:
    """One engine iteration: its phase and how it was decided, time, counts and breakdown."""

    iteration: int
    phase: str
    #: How the phase label was decided, in words.
    basis: str
    #: Where the iteration came from (an engine's annotation, or decode shapes).
    source: str
    name: str | None
    dur_us: float
    #: From its first GPU activity to the end of its last (null without GPU work).
    gpu_busy_span_us: float | None
    tokens: int | None
    prefill_tokens: int | None
    decode_tokens: int | None
    requests: int | None
    prefill_requests: int | None
    decode_requests: int | None
    tokens_per_s: float | None
    breakdown_us: StepTimes


@dataclass(frozen=True, kw_only=True)
class Phase:
    """The iterations of one phase together: count, time, mean iteration, tokens."""

    phase: str
    iterations: int
    time_us: float
    mean_us: float
    tokens: int | None
    tokens_per_s: float | None
    #: The breakdown of the mean iteration.
    average_us: StepTimes


@dataclass(frozen=True, kw_only=True)
class InferenceBlock:
    """Whether the trace records inference and why (or why not), and its iterations."""

    detected: bool
    evidence: tuple[str, ...]
    #: Why not, when there is evidence against (backward or optimizer ops).
    against: str | None
    iterations: tuple[Iteration, ...]
    phases: tuple[Phase, ...]
    #: Over the iterations that count tokens, with their time and rate.
    tokens: int | None
    tokens_time_us: float | None
    tokens_per_s: float | None

    @property
    def model_forwards(self) -> bool:
        """The iterations are root nn.Module calls labelled by their module, not LLM phases."""
        return bool(self.iterations) and self.iterations[0].source == COMPONENT_SOURCE
