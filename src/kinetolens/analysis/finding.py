"""A recommendation as every view shows it: what triggered it, what to do, what it saves."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Finding:
    """One recommendation: what triggered it, where, what to do, what it saves."""

    rule: str
    title: str
    evidence: str
    change: str
    saving_ms: float
    estimate: str
    where: dict[str, Any] = field(default_factory=dict)
    #: The mean step time (ms) the what-if simulator predicts after ``whatif``; None: a formula estimate.
    predicted_step_ms: float | None = None
    #: The what-if change the saving was simulated with (``kinetolens whatif --change``).
    whatif: str | None = None
    #: What ``saving_ms`` is per: ``step``, or ``iteration`` on an inference trace (:mod:`kinetolens.analysis.advice.inference`).
    per: str = "step"
    #: The steps the saving was simulated on when only a sample was (``"8 of 60 steps"``); None: all of them.
    simulated_on: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _repr_html_(self) -> str:
        """Jupyter shows a finding as a titled card, like the HTML report."""
        from html import escape

        return (
            f"<div><b>{escape(self.title)}</b> (saves up to {self.saving_ms:.2f} ms per {self.per}"
            + (f"; predicted step {self.predicted_step_ms:.2f} ms" if self.predicted_step_ms is not None else "")
            + ")"
            f"<p>{escape(self.evidence)}</p><p><b>Change:</b> {escape(self.change)}</p>"
            f"<p><i>Estimate: {escape(self.estimate)}</i></p></div>"
        )
