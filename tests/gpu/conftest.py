"""Every test here needs a CUDA GPU: marked ``gpu`` and skipped, with the
reason, wherever ``torch.cuda.is_available()`` is false (or torch is
missing), so CPU CI collects the folder and stays green."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gpu.record import Recorder

HERE = Path(__file__).resolve().parent


def cuda_missing() -> str | None:
    """Why this machine cannot run the GPU suite, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.backends.cuda.is_built():
        return f"this torch build ({torch.__version__}) has no CUDA support"
    if not torch.cuda.is_available():
        return "no CUDA device is available"
    return None


@pytest.hookimpl(tryfirst=True)  # before ``-m gpu`` selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = cuda_missing()
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.gpu)
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"GPU suite: {reason}"))


@pytest.fixture(scope="session")
def recorder() -> Recorder:
    """Records traces and figures where ``KINETOLENS_GPU_RECORD`` says (else only prints)."""
    rec = Recorder.from_env()
    rec.start()
    return rec
