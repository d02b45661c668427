"""A small but realistic training job to profile with ``kinetolens demo``.

Realistic enough to exercise the analysis: convolutions, normalization,
attention (via scaled_dot_product_attention), an MLP, a loss, backward and
an AdamW update, each in its own named module so the trace's
``nn.Module:`` events have something to say.  Small enough that warm-up plus
a few profiled steps take seconds on a 2-core CPU.  Data is synthetic (no
downloads) and seeded, so runs are comparable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kinetolens.capture.profile import profile


def build_model(num_classes: int = 10, channels: int = 16, dim: int = 32, heads: int = 4) -> Any:
    """Conv stem -> 8x8 tokens -> one pre-norm transformer block -> classifier."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v)
            return self.proj(y.transpose(1, 2).reshape(b, t, d))

    class TransformerBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = nn.LayerNorm(dim)
            self.attn = Attention()
            self.norm2 = nn.LayerNorm(dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class DemoNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, channels, 3, padding=1),
                nn.BatchNorm2d(channels),
                nn.ReLU(),
                nn.Conv2d(channels, dim, 3, stride=2, padding=1),
                nn.BatchNorm2d(dim),
                nn.ReLU(),
                nn.MaxPool2d(2),
            )
            self.block = TransformerBlock()
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, num_classes)

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            tokens = self.stem(images).flatten(2).transpose(1, 2)  # (B, 64, dim)
            tokens = self.block(tokens)
            return self.head(self.norm(tokens).mean(dim=1))

    return DemoNet()


def pick_device(device: str = "auto") -> str:
    """``auto`` means CUDA when available, else CPU."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_demo(
    logdir: str | Path = "./kinetolens-runs",
    *,
    run: str = "demo",
    steps: int = 3,
    warmup: int = 2,
    batch_size: int = 16,
    device: str = "auto",
) -> list[Path]:
    """Train the demo model for ``warmup + steps`` steps under a profile and
    return the trace file(s) written to ``logdir/run/``."""
    import torch
    from torch.nn import functional as F

    torch.manual_seed(0)
    dev = torch.device(pick_device(device))
    model = build_model().to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator(device="cpu").manual_seed(0)

    with profile(logdir=logdir, run=run, steps=steps, warmup=warmup) as prof:
        prof.announce = False  # ``kinetolens demo`` prints the trace's path itself
        for _ in range(warmup + steps):
            # Synthetic batch made on the host and copied, like a data loader.
            images = torch.randn(batch_size, 3, 32, 32, generator=generator).to(dev, non_blocking=True)
            labels = torch.randint(0, 10, (batch_size,), generator=generator).to(dev, non_blocking=True)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            prof.step()
    return list(prof.trace_files)
